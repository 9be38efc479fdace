from realm.model.networks.entity_types import ENTITY_LABELS, ENTITY_TYPE_IDS, wordpiece_entity_types
from realm.pipelines.ner import load_ner


def test_wordpieces_inside_an_entity_carry_its_type_and_the_rest_none(tokenizer):
    text = "Marie Curie won in 1903 and 1911."
    encoding = tokenizer.encode_with_offsets(text)
    entities = [(0, 11, "PERSON"), (19, 23, "DATE"), (28, 32, "DATE"), (5, 6, "NOT_A_LABEL")]
    types = wordpiece_entity_types(encoding.offsets, len(encoding.ids), entities)
    by_piece = dict(zip(tokenizer.convert_ids_to_tokens(encoding.ids), types))
    person, date = ENTITY_TYPE_IDS["PERSON"], ENTITY_TYPE_IDS["DATE"]
    assert [t for t in types if t] == [person] * len(tokenizer.encode("Marie Curie")) + [date, date]
    assert by_piece["won"] == by_piece["and"] == by_piece["."] == 0
    assert wordpiece_entity_types(None, 4, entities) == [0, 0, 0, 0]  # a text that is not the body's


def test_the_type_ids_cover_every_label_the_ner_model_gives():
    assert tuple(load_ner().get_pipe("ner").labels) == ENTITY_LABELS
