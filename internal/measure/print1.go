package measure

import (
	"context"
	"fmt"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
	"github.com/sandq/sandq/worker"
)

// Print1 is the benchmarks' unit of work through a pool alone: print(1) in
// the container of python's default job (the one a queued print(1) job gets,
// worker.WarmSpec). It returns that spec, to warm, and a job function for
// Run that fails unless the program printed "1\n".
func Print1(pool *sandbox.Pool) (sandbox.Spec, func() error) {
	spec, _ := worker.WarmSpec(jobs.Policy{}, "python", langs.DefaultImagePrefix)
	lim := worker.LimitsOf(jobs.Policy{}.WithDefaults().DefaultLimits)
	return spec, func() error {
		res, err := pool.Run(context.Background(), spec, &agent.RunRequest{
			Files: []agent.File{{Path: "main.py", Data: []byte("print(1)")}},
			Steps: []agent.Step{{Name: "run", Argv: []string{"python3", "main.py"}, Timeout: lim.Timeout, Rlimits: lim.Rlimits, Prestart: true}},
		})
		if err != nil {
			return err
		}
		if got := string(res.Last().Stdout.Bytes()); got != "1\n" {
			return fmt.Errorf("pool job printed %q", got)
		}
		return nil
	}
}
