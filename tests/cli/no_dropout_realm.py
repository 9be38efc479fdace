"""`realm` with every model preset's dropout set to 0: what the multi-process tests run, so a
run's losses depend only on its examples and weights, not on the dropout masks each rank draws.

    python tests/cli/no_dropout_realm.py train pretrain --preset tiny --output DIR
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/cli/no_dropout_realm.py train pretrain ...
"""

import sys

from realm.model.networks.config import ModelConfig

_preset = ModelConfig.preset.__func__


def _without_dropout(cls, name, *args, **overrides):
    return _preset(cls, name, *args, **{**overrides, "dropout": 0.0})


ModelConfig.preset = classmethod(_without_dropout)

if __name__ == "__main__":
    from realm.cli.main import cli

    sys.exit(cli())
