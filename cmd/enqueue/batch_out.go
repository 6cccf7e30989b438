package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// resultsFile is a batch's --out: JSON lines, one per finished job,
// appended as jobs finish. It is also the batch's memory across runs: a
// rerun reads it first and does not run again what it holds.
//
// Each line is written with one write(2) of the whole line and its
// newline, so a process killed mid-run leaves at most one partial line,
// at the end; openResults drops it.
type resultsFile struct {
	path string
	f    *os.File  // nil when writing to stdout
	w    io.Writer // f, or stdout
	// dropped is the size of a truncated last line removed at open.
	dropped int
}

// openResults opens path for appending after calling scan with every
// complete line already in it (1-based line numbers). A last line without
// its newline is the remains of an interrupted write: it is cut off the
// file (and reported in dropped), and its job will be fetched again. An
// error from scan on a complete line is returned with its line number:
// the file is not a results file, or not this command's, and nothing is
// appended to it. path "-" is stdout: nothing is read, nothing resumes.
func openResults(path string, stdout io.Writer, scan func(line int, b []byte) error) (*resultsFile, error) {
	if path == "-" {
		return &resultsFile{path: path, w: stdout}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	rf := &resultsFile{path: path, f: f, w: f}
	if err := rf.load(scan); err != nil {
		_ = f.Close()
		return nil, err
	}
	return rf, nil
}

func (rf *resultsFile) load(scan func(line int, b []byte) error) error {
	br := bufio.NewReaderSize(rf.f, 1<<20)
	var off int64
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(b) > 0 {
				// Truncated by a crash mid-write: drop it.
				if err := rf.f.Truncate(off); err != nil {
					return fmt.Errorf("--out %s: drop truncated last line: %w", rf.path, err)
				}
				rf.dropped = len(b)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("--out %s: %w", rf.path, err)
		}
		off += int64(len(b))
		if line := bytes.TrimSpace(b); len(line) > 0 {
			if err := scan(n, line); err != nil {
				return fmt.Errorf("--out %s: line %d: %w; is it the results file of this input? Nothing was run or written", rf.path, n, err)
			}
		}
	}
	if _, err := rf.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("--out %s: %w", rf.path, err)
	}
	return nil
}

// writeLine appends b and a newline in one write.
func (rf *resultsFile) writeLine(b []byte) error {
	line := make([]byte, 0, len(b)+1)
	line = append(append(line, b...), '\n')
	if _, err := rf.w.Write(line); err != nil {
		return fmt.Errorf("--out %s: %w", rf.path, err)
	}
	return nil
}

// Close syncs and closes the file (not stdout).
func (rf *resultsFile) Close() error {
	if rf.f == nil {
		return nil
	}
	return errors.Join(rf.f.Sync(), rf.f.Close())
}
