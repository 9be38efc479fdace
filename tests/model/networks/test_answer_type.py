import torch

from realm.model.networks.answer_type import AnswerType, entity_span_types
from realm.model.networks.entity_types import ENTITY_TYPE_IDS

PERSON, DATE = ENTITY_TYPE_IDS["PERSON"], ENTITY_TYPE_IDS["DATE"]


def test_a_span_has_an_entity_type_only_where_it_covers_one_entity_exactly():
    """A person at positions 2-3, a date at 4 right after it, another date at 7-8."""
    types = torch.tensor([[0, 0, PERSON, PERSON, DATE, 0, 0, DATE, DATE, 0]])
    #        (start, end): the person, its first half, its second half, the person and the date, the date,
    #        the second date, it with a word before, a word outside every entity, spans ending and lying past the row
    cases = [(2, 3), (2, 2), (3, 3), (2, 4), (4, 4), (7, 8), (6, 8), (5, 5), (9, 12), (10, 13)]
    starts = torch.tensor([[s for s, _ in cases]])
    ends = torch.tensor([[e for _, e in cases]])
    assert entity_span_types(types, starts, ends)[0].tolist() == [PERSON, 0, 0, 0, DATE, DATE, 0, 0, 0, 0]


def test_a_spans_score_is_its_types_score_from_the_mean_of_the_question_states():
    torch.manual_seed(0)
    typing = AnswerType(hidden_size=4)
    types = torch.tensor([[0, 0, 0, PERSON, PERSON, 0], [0, 0, DATE, 0, 0, 0]])
    starts, ends = torch.tensor([[3, 1], [2, 3]]), torch.tensor([[4, 1], [2, 4]])
    hidden = torch.randn(2, 6, 4)
    question = torch.tensor([[False, True, True, False, False, False], [False, True, False, False, False, False]])
    assert typing(hidden, question, types, starts, ends).abs().sum() == 0  # from zero
    with torch.no_grad():
        typing.score.weight.normal_()
    scores = typing(hidden, question, types, starts, ends)
    means = torch.stack([hidden[0, 1:3].mean(dim=0), hidden[1, 1]])  # [2, 4]
    per_type = means @ typing.score.weight.T  # [2, types]
    expected = torch.stack([per_type[0, [PERSON, 0]], per_type[1, [DATE, 0]]])
    assert torch.allclose(scores, expected, atol=1e-6)
