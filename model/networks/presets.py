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


def record_model_preset(
    layout: RunLayout, model_preset: str, run_preset: str | None = None, bert_dir: str | None = None,
    check_vocabulary: bool = True,
) -> None:
    """`layout.record_model_preset`, a run that recorded this preset under its old name taken as
    made with it (and its record renamed), `bert_dir` checked first (`check_bert_dir`). With
    `check_vocabulary` (a training stage starting), refused unless the run's blocks and examples
    were cut with the vocabulary of the BERT it trains (`check_prepared_vocabulary`)."""
    from realm.model.networks.bert_dir import check_bert_dir

    if bert_dir is not None:
        bert_dir = check_bert_dir(bert_dir)
    recorded = layout.model_preset()
    renamed = recorded if current_model_preset(recorded) == model_preset else None
    layout.record_model_preset(model_preset, run_preset=run_preset, renamed_from=renamed, bert_dir=bert_dir)
    if check_vocabulary:
        check_prepared_vocabulary(layout, bert_dir)


def check_prepared_vocabulary(layout: RunLayout, bert_dir: str | None) -> None:
    """ArtifactError in one line when the run's prepared blocks and examples were cut with another
    vocabulary than `bert_dir`'s (None: the default's): their wordpiece ids would be other words
    to the model. A run prepared before prepare recorded its vocabulary is not checked."""
    from realm.model.tokenization import load_tokenizer
    from realm.schemas.io import ArtifactError
    from realm.schemas.run_layout import bert_text

    prepared = layout.prepared_vocabulary()
    if prepared is None:
        return
    wanted = load_tokenizer(bert_dir).vocabulary_sha256
    if prepared["sha256"] != wanted:
        raise ArtifactError(
            f"{layout.root}: its blocks and examples were cut with the vocabulary of {prepared.get('source')} "
            f"(sha256 {prepared['sha256'][:12]}), not that of {bert_text(bert_dir)} ({wanted[:12]}); prepare it again "
            f"with the same --bert (realm prepare --bert DIR), or use a new --output"
        )
