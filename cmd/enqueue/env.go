package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// envExitHelp documents the env commands' exit statuses.
const envExitHelp = `Exit status:
  0    done
  64   invalid recipe (the message names the field)
  2    usage error, no such environment, one of that name with another
       recipe, Redis unreachable`

// The env commands manage environments built from recipes
// (docs/environments.md) through the service, as the operator's tool
// (service.Operator): every scope, shared environments included.
func (a *app) newEnvCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Make, list, show and delete environments built from recipes",
		Long: `An environment is a sandq language image plus Debian packages, libraries and
files (a recipe), built by the worker that runs the first job naming it
("environment": NAME, or enqueue run --environment NAME) and kept on its
engine. Environments belong to --tenant, or are shared (--shared) with every
tenant: a job's name resolves to its tenant's own first.

` + envExitHelp,
	}
	cmd.PersistentFlags().StringVar(&tenant, "tenant", "", "tenant owning the environments (env SANDQ_TENANT)")
	config.Env(cmd.PersistentFlags(), "tenant", "SANDQ_TENANT")
	cmd.AddCommand(a.newEnvCreateCmd(&tenant), a.newEnvListCmd(&tenant), a.newEnvShowCmd(&tenant), a.newEnvRmCmd(&tenant))
	return cmd
}

// withService runs f with a service over the global flags' Redis.
func (a *app) withService(cmd *cobra.Command, f func(*service.Service) error) error {
	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	svc, err := service.New(cmd.Context(), service.Config{Client: c})
	if err != nil {
		return a.failure(cmd, err)
	}
	defer svc.Close()
	return f(svc)
}

// serviceFailure maps a service error to the command's exit status.
func (a *app) serviceFailure(cmd *cobra.Command, err error) error {
	switch service.KindOf(err) {
	case service.Invalid, service.TooLarge:
		return &exitError{code: exitRejected, err: err}
	case service.NotFound, service.Conflict, service.Forbidden:
		return &exitError{code: exitCLI, err: err}
	}
	return a.failure(cmd, err)
}

func (a *app) newEnvCreateCmd(tenant *string) *cobra.Command {
	var r jobs.Recipe
	var files []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create --name NAME --lang LANG [--package P]... [--library L]... [--file PATH=LOCAL]...",
		Short: "Make an environment from a recipe",
		Long: `Record a recipe as an environment. Nothing is built now: the worker that runs
the first job naming it builds its image (enqueue env show NAME then says
built, or failed with the build's output). Making an environment that exists
with the same recipe does nothing; with another recipe it is an error
(delete it first).

` + envExitHelp,
		Example: `  enqueue env create --name jq-md5 --lang javascript --package jq --library js-md5@0.8.3
  enqueue env create --name lab --lang python --file /opt/lab/config.json=./config.json --shared`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range files {
				p, local, ok := strings.Cut(f, "=")
				if !ok || p == "" || local == "" {
					return usageError(cmd, fmt.Errorf("--file %q: want PATH=LOCAL (the path in the image, then the local file)", f))
				}
				data, err := os.ReadFile(local)
				if err != nil {
					return usageError(cmd, fmt.Errorf("--file %s: %w", f, err))
				}
				r.Files = append(r.Files, jobs.RecipeFile{Path: p, Content: string(data)})
			}
			return a.withService(cmd, func(svc *service.Service) error {
				v, made, err := svc.CreateEnvironment(cmd.Context(), service.Operator(*tenant), r)
				if err != nil {
					return a.serviceFailure(cmd, err)
				}
				if asJSON {
					return writeJSON(a.stdout, v)
				}
				if !made {
					fmt.Fprintf(a.stderr, "enqueue: environment %s exists with this recipe; nothing changed\n", v.Name)
				}
				_, err = fmt.Fprintln(a.stdout, v.Name)
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringVar(&r.Name, "name", "", "the environment's name: 1 to 64 of a-z 0-9 _ . -")
	fl.StringVarP(&r.Lang, "lang", "l", "", "the sandq language whose image is the base: "+langList())
	fl.StringArrayVar(&r.Packages, "package", nil, `Debian package, optionally =VERSION ("jq", "jq=1.6-2.1+deb12u3") (repeatable)`)
	fl.StringArrayVar(&r.Libraries, "library", nil, "library installed with the language's installer, as a job's --lib (repeatable)")
	fl.StringArrayVar(&files, "file", nil, "PATH=LOCAL: the local file LOCAL written into the image at the absolute PATH, root's, mode 0644 (repeatable)")
	fl.BoolVar(&r.Shared, "shared", false, "shared with every tenant (the operator's), not --tenant's own")
	fl.BoolVar(&asJSON, "json", false, "print the environment as JSON")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("lang")
	return cmd
}

func (a *app) newEnvListCmd(tenant *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every tenant's environments and the shared ones, with their build state",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withService(cmd, func(svc *service.Service) error {
				list, err := svc.Environments(cmd.Context(), service.Operator(*tenant))
				if err != nil {
					return a.serviceFailure(cmd, err)
				}
				if asJSON {
					return writeJSON(a.stdout, list)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tTENANT\tLANG\tSTATE\tPACKAGES\tLIBRARIES\tFILES\tCREATED")
				for _, v := range list {
					owner := v.Tenant
					if v.Shared {
						owner = "(shared)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", v.Name, dash(owner), v.Lang, v.State,
						dash(strings.Join(v.Packages, ",")), dash(strings.Join(v.Libraries, ",")), len(v.Files), v.Created.Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) newEnvShowCmd(tenant *string) *cobra.Command {
	var shared bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show an environment (--tenant's own, else the shared one) and its build, as JSON",
		Long: `Print the environment a job of --tenant naming NAME would run in (its own, else
the shared one; --shared: the shared one), as JSON: the recipe, its state
(built, failed or not_built) and the last build a worker recorded (the
image's ID, the time it took, when it was last used; for a failed build the
error and the tail of its output).

` + envExitHelp,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withService(cmd, func(svc *service.Service) error {
				v, err := svc.Environment(cmd.Context(), service.Operator(*tenant), args[0], shared)
				if err != nil {
					return a.serviceFailure(cmd, err)
				}
				return writeJSON(a.stdout, v)
			})
		},
	}
	cmd.Flags().BoolVar(&shared, "shared", false, "the shared environment of that name")
	return cmd
}

func (a *app) newEnvRmCmd(tenant *string) *cobra.Command {
	var shared bool
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete an environment: jobs naming it are refused; the workers remove its image",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withService(cmd, func(svc *service.Service) error {
				if err := svc.DeleteEnvironment(cmd.Context(), service.Operator(*tenant), args[0], shared); err != nil {
					return a.serviceFailure(cmd, err)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&shared, "shared", false, "the shared environment of that name, not --tenant's own")
	return cmd
}
