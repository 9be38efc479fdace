import math

import torch

from realm.model.networks.marginal import LOG_ZERO, early_update_loss, marginal_log_likelihood


def test_marginal_equals_brute_force_sum_over_candidates():
    torch.manual_seed(1)
    retrieval_logits = torch.randn(3, 5)
    log_p_y_given_z = -torch.rand(3, 5) * 10
    got = marginal_log_likelihood(retrieval_logits, log_p_y_given_z)
    for b in range(3):
        scores = retrieval_logits[b].tolist()
        normaliser = sum(math.exp(s) for s in scores)
        p_y = sum(math.exp(s) / normaliser * math.exp(lp) for s, lp in zip(scores, log_p_y_given_z[b].tolist()))
        assert math.isclose(got[b].item(), math.log(p_y), rel_tol=1e-5)


def test_gradient_matches_paper_identity():
    """∇_f log p(y|x) = r(z) = [p(y|z,x)/p(y|x) − 1] p(z|x) (REALM §3.3)."""
    torch.manual_seed(2)
    f = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    log_p_y_given_z = -torch.rand(4, 8, dtype=torch.float64) * 5
    marginal_log_likelihood(f, log_p_y_given_z).sum().backward()

    p_z = torch.softmax(f.detach(), dim=-1)
    p_y_given_z = log_p_y_given_z.exp()
    p_y = (p_z * p_y_given_z).sum(-1, keepdim=True)
    r = (p_y_given_z / p_y - 1) * p_z
    torch.testing.assert_close(f.grad, r.to(f.grad.dtype), rtol=1e-5, atol=1e-6)


def test_padding_candidates_get_zero_probability_and_finite_gradients():
    f = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    log_p = torch.tensor([[-1.0, -2.0, -0.5]])
    mask = torch.tensor([[True, True, False]])
    got = marginal_log_likelihood(f, log_p, mask)
    expected = marginal_log_likelihood(f[:, :2].detach(), log_p[:, :2])
    torch.testing.assert_close(got.detach(), expected)
    got.sum().backward()
    assert torch.isfinite(f.grad).all() and f.grad[0, 2] == 0


def test_early_update_loss_is_minus_log_gold_probability_and_skips_unanswerable():
    f = torch.tensor([[0.0, 1.0, 2.0], [0.5, 0.5, 0.5]], requires_grad=True)
    gold = torch.tensor([[False, True, True], [False, False, False]])
    loss = early_update_loss(f, gold)
    p = torch.softmax(f[0].detach(), -1)
    assert math.isclose(loss.item(), -math.log(p[1] + p[2]), rel_tol=1e-6)
    loss.backward()
    assert torch.isfinite(f.grad).all() and (f.grad[1] == 0).all()


def test_early_update_loss_is_zero_without_any_gold():
    f = torch.randn(2, 4, requires_grad=True)
    loss = early_update_loss(f, torch.zeros(2, 4, dtype=torch.bool))
    assert loss.item() == 0
    loss.backward()
    assert (f.grad == 0).all()


def test_all_masked_rows_stay_finite():
    f = torch.zeros(1, 2, requires_grad=True)
    got = marginal_log_likelihood(f, torch.full((1, 2), LOG_ZERO))
    got.sum().backward()
    assert torch.isfinite(got).all() and torch.isfinite(f.grad).all()
