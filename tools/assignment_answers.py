"""The reference answers of the exercises whose answer is a value, not a function.

A coding exercise's reference answer is its solution from the package (``registry()[id]
.solution()``, the code ``solution(id)`` shows). An exercise answered with a value (a number, a
line, shapes, a measurement) has a worked solution in prose; the instructor edition
(``tools/assignments.py``) puts the code below in the solution cell of its master notebook
instead: the answer a student would write in the chapter's answer cell, computed where the
exercise asks for a measurement, with the chapter's own objects.
"""

ANSWERS = {
    "dot-product/score-variance": "variance = 64  # d_k: 64 products of variance 1",
    "dot-product/saturation-gradient": """\
n = 20_000
q, k = torch.randn(n, 1, 512), torch.randn(n, 16, 512)
raw = (q @ k.transpose(-2, -1)).squeeze(1)
upstream = torch.randn(n, 16)
sizes = []
for s in (raw, raw / 512**0.5):
    s = s.clone().requires_grad_(True)
    (torch.softmax(s, -1) * upstream).sum().backward()
    sizes.append(s.grad.norm(dim=-1).mean().item())
gradient_ratio = sizes[0] / sizes[1]""",
    "multi-head/parameter-count": "parameter_count = 4 * 512 * 512 + 4 * 512",
    "multi-head/dropout-row-sum": """\
weights = torch.full((100_000, 10), 0.1)
dropped = torch.nn.functional.dropout(weights, p=0.5, training=True)
row_sum_std = dropped.sum(-1).std().item()""",
    "masking/count-allowed": "allowed_pairs = (1 + 2 + 3 + 4 + 5 + 6) + (1 + 2 + 3 + 4 + 4 + 4) + 11",
    "cross-attention/shapes": """\
answer = {
    "weights": (2, 4, 5, 9),
    "output": (2, 5, 48),
    "key_padding_mask": (2, 1, 1, 9),
}""",
    "cross-attention/parameter-count": "cross_parameter_count = 2 * (48 * 48 + 48) + 2 * (32 * 48 + 48)",
    "cross-attention/which-bug": 'wrong_line = "d"',
    "cross-attention/diagonal-baseline": """\
N, L = test_data.alignment.shape
S = test_data.src.size(1)
same_position = torch.eye(L, S).expand(N, L, S)
diagonal_accuracy = alignment_accuracy(same_position, test_data.alignment)""",
    "language-model/initial-loss": "answer = math.log(63)  # ln V: uniform over 63 characters",
    "language-model/temperature-experiment": """\
logits = torch.log(torch.tensor([0.5, 0.3, 0.2]))
probs = torch.softmax(logits / 0.5, -1)
draws = torch.multinomial(
    probs, 20_000, replacement=True, generator=torch.Generator().manual_seed(0)
)""",
    "inference/cache-bytes": "cache_bytes = 2 * 80 * 8 * (8192 // 64) * 4096 * 2",
    "complexity/causal-cells": "cells_answer = 256 * 256 * sum(range(1, 17))",
    "complexity/multihead-flops": "flops_answer = 4 * 2 * 1024 * 768**2 + 4 * 1024**2 * 768",
    "complexity/find-the-bug": "bug_line = 13",
    "complexity/causal-flops": "flops_ratio = 36 / 64  # 8 query blocks: 1 + ... + 8 of 64 tiles",
    "adaptive-span/cells": "cells_answer = 4 * 32 * 16 * (16 + 55)",
    "adaptive-span/find-the-bug": "bug_line = 6",
    "all-attention/parameter-count": "answer = 4 * 512**2 + 2 * 2048 * 512",
    "all-attention/memory-cost": "macs_answer = 2 * 1024 * 512",
    "all-attention/find-the-bug": "bug_line = 7",
    "gpu/span-skipped-tiles": "skipped_tiles = 64 * 65 // 2 - (1 + 2 + 3 + 4 + 60 * 5)",
    "gpu/find-the-bug": "bug_line = 6",
}
