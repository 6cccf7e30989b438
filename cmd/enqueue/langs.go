package main

import (
	"cmp"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

type langsFlags struct {
	json       bool
	noVersions bool
}

// langInfo is one line of `enqueue langs`.
type langInfo struct {
	langs.Info
	Image string `json:"image,omitempty"`
	// Error says why the version is unknown (no worker has published it,
	// the image is missing on the worker); Version is then empty.
	Error string `json:"error,omitempty"`
}

func (a *app) newLangsCmd() *cobra.Command {
	f := &langsFlags{}
	cmd := &cobra.Command{
		Use:   "langs",
		Short: "List the languages, their aliases, library installers and toolchain versions",
		Long: `List every language sandq runs, with the names a job may use for it, the
package manager that installs its libraries, and the version of its
toolchain. Workers read the versions from their images when they start (in a
sandbox container, as a job would run) and publish them in Redis; this
command reads them there and needs no container engine. With --no-versions,
Redis is not contacted.

Exit status: 0 when every version is known (or --no-versions); 1 when a
version is missing (no worker has published it, or its image is missing on
the worker: the list is still printed, with the reason per language); 2 when
Redis cannot be reached.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.langs(cmd, f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print a JSON array")
	fl.BoolVar(&f.noVersions, "no-versions", false, "list names only; do not contact Redis")
	return cmd
}

func (a *app) langs(cmd *cobra.Command, f *langsFlags) error {
	var published map[string]jobs.LangVersion
	if !f.noVersions {
		c, err := a.newClient()
		if err != nil {
			return err
		}
		defer c.Close()
		if published, err = c.Store().LangVersions(cmd.Context()); err != nil {
			return a.failure(cmd, err)
		}
	}
	var infos []langInfo
	for _, in := range langs.Describe(nil) {
		li := langInfo{Info: in}
		if !f.noVersions {
			v, ok := published[in.Name]
			switch {
			case !ok:
				li.Error = "no worker has published its version (workers read it from the image when they start)"
			case v.Error != "":
				li.Error = v.Error
			default:
				li.Version = v.Version
			}
			li.Image = v.Image
		}
		infos = append(infos, li)
	}
	if f.json {
		if err := writeJSON(a.stdout, infos); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		header := "LANGUAGE\tALIASES\tLIBRARIES"
		if !f.noVersions {
			header += "\tVERSION"
		}
		fmt.Fprintln(tw, header)
		for _, li := range infos {
			line := fmt.Sprintf("%s\t%s\t%s", li.Name, cmp.Or(strings.Join(li.Aliases, ", "), "-"), cmp.Or(li.Libraries, "-"))
			if !f.noVersions {
				line += "\t" + cmp.Or(li.Version, "unavailable: "+li.Error)
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var missing []string
	for _, li := range infos {
		if li.Error != "" {
			missing = append(missing, li.Name)
		}
	}
	if len(missing) > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("no version known for %s (start a worker with the images: make images)", strings.Join(missing, ", "))}
	}
	return nil
}
