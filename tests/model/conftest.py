"""The model tests' own fixture: every test starts from the same torch seed (the shared
fixtures are in tests/conftest.py)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
