"""The model presets' names, importable without torch: the flows' forms and the CLI offer them,
and `realm.model.networks.config.PRESETS` builds one `ModelConfig` per name.

`random-2l`: 2 random layers (tests, plumbing); `bf16-6l`: the 6-layer MiniLM BERT under bf16
autocast without dropout (the default); `bf16-2l`: its first 2 layers; `fp32-6l`: the 6 layers
in float32 with the paper's dropout.
"""

from typing import Literal

ModelPreset = Literal["random-2l", "bf16-6l", "bf16-2l", "fp32-6l"]
