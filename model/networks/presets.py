"""The model presets' names, importable without torch: the flows' forms and the CLI offer them,
and `realm.model.networks.config.PRESETS` builds one `ModelConfig` per name.

`random-2l`: 2 random layers (tests, plumbing); `bf16-6l`: the 6-layer MiniLM BERT under bf16
autocast without dropout (the default); `bf16-2l`: its first 2 layers; `fp32-6l`: the 6 layers
in float32 with the paper's dropout.
"""

from __future__ import annotations

from typing import Literal, get_args

from realm.schemas.run_layout import RunLayout

ModelPreset = Literal["random-2l", "bf16-6l", "bf16-2l", "fp32-6l"]
# The names runs recorded before the model presets were renamed apart from the run presets.
OLD_MODEL_PRESET_NAMES = {"tiny": "random-2l", "default": "bf16-6l", "fast": "bf16-2l", "paper": "fp32-6l"}


def current_model_preset(name: str | None) -> str | None:
    """A recorded model preset's name now (a run may have recorded its old name)."""
    return name if name is None or name in get_args(ModelPreset) else OLD_MODEL_PRESET_NAMES.get(name, name)


def record_model_preset(layout: RunLayout, model_preset: str, run_preset: str | None = None) -> None:
    """`layout.record_model_preset`, a run that recorded this preset under its old name taken as
    made with it (and its record renamed)."""
    recorded = layout.model_preset()
    renamed = recorded if current_model_preset(recorded) == model_preset else None
    layout.record_model_preset(model_preset, run_preset=run_preset, renamed_from=renamed)
