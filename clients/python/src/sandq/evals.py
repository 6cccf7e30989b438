"""Evaluations: many samples per task run as one batch, and pass@k.

The API has no evaluation endpoint of its own: an evaluation is a batch
whose jobs are tagged with their task, and pass@k is computed here with
the same unbiased estimator as sandq's Go package eval (HumanEval's).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from ._types import Batch, Result

__all__ = ["EvalReport", "TaskCount", "estimate", "pass_at_k", "passed", "summarize"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k for one task with n samples of
    which c passed: 1 - C(n-c, k) / C(n, k), computed as
    1 - prod_{i=n-c+1..n} (1 - k/i)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k with n={n} c={c} k={k}: want 0 <= c <= n and 1 <= k <= n")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1 - k / i
    return 1 - prod


@dataclass
class TaskCount:
    """A task's samples (n) and how many passed (c)."""
    n: int = 0
    c: int = 0


def estimate(counts: Mapping[str, TaskCount], ks: Iterable[int]) -> tuple[dict[int, float], list[int]]:
    """pass@k averaged over tasks, for each k that every task has at
    least k samples for; the other ks are returned as skipped. Tasks
    without samples are left out."""
    tasks = sorted(task for task, tc in counts.items() if tc.n > 0)
    min_n = min((counts[task].n for task in tasks), default=0)
    out: dict[int, float] = {}
    skipped: list[int] = []
    for k in sorted(set(ks)):
        if not tasks or k < 1 or k > min_n:
            skipped.append(k)
            continue
        out[k] = sum(pass_at_k(counts[task].n, counts[task].c, k) for task in tasks) / len(tasks)
    return out, skipped


def passed(r: Result) -> bool:
    """Whether a sample passed: a judged job's verdict is accepted, any
    other job succeeded."""
    if r.verdict:
        return r.verdict == "accepted"
    return r.status == "succeeded"


@dataclass
class EvalReport:
    """An evaluation's outcome: pass@k ("pass@1": 0.5, ...), the ks with
    too few samples, each task's counts, statuses and verdicts counted,
    and every Result (in finishing order)."""
    batch_id: str
    pass_at: dict[str, float] = field(default_factory=dict)
    skipped_k: list[int] = field(default_factory=list)
    tasks: dict[str, TaskCount] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    results: list[Result] = field(default_factory=list, repr=False)


def summarize(batch: Batch, results: Sequence[Result], ks: Sequence[int], tag: str = "task") -> EvalReport:
    """An EvalReport of an evaluation batch's results: each job's task is
    its tags[tag]."""
    counts: dict[str, TaskCount] = {}
    for r in results:
        tc = counts.setdefault(r.tags.get(tag, ""), TaskCount())
        tc.n += 1
        tc.c += passed(r)
    pass_at, skipped = estimate(counts, ks)
    return EvalReport(
        batch_id=batch.id, pass_at={f"pass@{k}": v for k, v in pass_at.items()}, skipped_k=skipped, tasks=counts,
        statuses=dict(Counter(r.status for r in results)), verdicts=dict(Counter(r.verdict for r in results if r.verdict)),
        refused=sum(1 for it in batch.items if it.error is not None), results=list(results))
