import torch

from realm.model.networks.span_features import NUM_DISTANCE_BUCKETS, SpanFeatures, span_feature_ids


def test_feature_ids_give_width_distance_bucket_and_holding_from_the_question_match_flags():
    """Flags at positions 3 and 20 of a 30-position row; a second row has none."""
    flags = torch.zeros(2, 30, dtype=torch.long)
    flags[0, [3, 20]] = 1
    #                       (start, end): width − 1, distance to the nearest flag outside the span, holds one
    cases = [(4, 4), (5, 6), (8, 9), (10, 12), (2, 4), (12, 13), (29, 29), (0, 1)]
    starts = torch.tensor([[s for s, _ in cases]] * 2)
    ends = torch.tensor([[e for _, e in cases]] * 2)
    width, bucket, holds = span_feature_ids(flags, starts, ends)
    assert width[0].tolist() == [0, 1, 1, 2, 2, 1, 0, 1]
    # distances 1, 2, 5 (8 − 3), 7 (12 → 20 is 8, 10 − 3 is 7), 16 (20 − 4; the flag at 3 is inside),
    # 7 (20 − 13), 9 (29 − 20), 2 (3 − 1)
    assert bucket[0].tolist() == [0, 1, 3, 4, 6, 4, 5, 1]
    assert holds[0].tolist() == [0, 0, 0, 0, 1, 0, 0, 0]
    assert bucket[1].tolist() == [NUM_DISTANCE_BUCKETS - 1] * len(cases) and holds[1].sum() == 0


def test_feature_ids_of_spans_past_the_row_are_read_off_its_last_position():
    flags = torch.zeros(1, 6, dtype=torch.long)
    flags[0, 1] = 1
    width, bucket, holds = span_feature_ids(flags, torch.tensor([[4, 9]]), torch.tensor([[5, 12]]))
    assert width.tolist() == [[1, 0]] and bucket.tolist() == [[2, 3]] and holds.tolist() == [[0, 0]]


def test_span_features_sum_one_vector_per_feature():
    torch.manual_seed(0)
    features = SpanFeatures(max_span=4, span_hidden_size=3)
    with torch.no_grad():
        for embedding in features.children():
            embedding.weight.normal_()
    flags = torch.tensor([[0, 0, 1, 0, 0, 0]])
    out = features(flags, torch.tensor([[4]]), torch.tensor([[5]]))  # width 2, 2 from the flag, holds none
    expected = features.width.weight[1] + features.distance.weight[1] + features.holds_question_word.weight[0]
    assert torch.allclose(out[0, 0], expected)
