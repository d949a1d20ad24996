"""torch.ops.ka.<op>: aten's schemas, ka's pipeline (libtorch's kernel where ka declines),
whether or not the aten override is enabled."""

import pytest
import torch
import torch.nn.functional as F

import ka
from conftest import served


def test_schemas_are_atens():
    for name in ["mm", "addmm", "bmm", "linear", "_softmax", "layer_norm", "gelu"]:
        ka_schema = str(getattr(ka.ops, name).default._schema)
        aten_schema = str(getattr(torch.ops.aten, name).default._schema)
        assert ka_schema.replace("ka::", "aten::", 1) == aten_schema


def test_ka_ops_match_aten_and_run_on_ka():
    x, w, b = torch.randn(24, 40), torch.randn(12, 40), torch.randn(12)
    torch.testing.assert_close(ka.ops.linear(x, w, b), F.linear(x, w, b), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ka.ops.linear(x.view(2, 12, 40), w, b),
                               F.linear(x.view(2, 12, 40), w, b), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ka.ops.mm(x, w.t()), x @ w.t(), rtol=1e-4, atol=1e-4)
    h = torch.randn(8, 64)
    g, beta = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(ka.ops.layer_norm(h, [64], g, beta, 1e-5, True),
                               F.layer_norm(h, [64], g, beta), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ka.ops.softmax(h, -1), F.softmax(h, -1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ka.ops.gelu(h), F.gelu(h), rtol=1e-5, atol=1e-6)
    assert served("aten::addmm")[0] == 1 and served("aten::layer_norm")[0] == 1
    assert not ka.is_enabled()


def test_ka_ops_fall_back_for_other_dtypes():
    a = torch.randn(5, 6, dtype=torch.float64)
    assert torch.equal(ka.ops.mm(a, a.t()), a @ a.t())
    assert served("aten::mm") == (0, 1)


def test_backward_through_ka_ops_is_a_clear_error():
    x = torch.randn(4, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="ka::mm"):
        ka.ops.mm(x, x).sum().backward()
