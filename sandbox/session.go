package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/sandq/sandq/agent"
)

// Sessions: a container whose agent runs a live interpreter, cell by cell
// (agent.OpSessionStart). Such a container serves one session and is then
// removed (Pool.Release with healthy false): it is never scrubbed for
// another.

// call sends one request and waits for its single answer, or for the
// backstop.
func (c *Container) call(ctx context.Context, req agent.Request, backstop time.Duration) (agent.Response, error) {
	id := c.nextID.Add(1)
	req.ID = id
	ch := c.register(id, 1)
	defer c.unregister(id)
	if err := c.enc.Encode(req); err != nil {
		return agent.Response{}, fmt.Errorf("%w: send: %v", ErrAgentGone, err)
	}
	t := time.NewTimer(backstop)
	defer t.Stop()
	select {
	case resp := <-ch:
		return resp, nil
	case <-c.dead:
		return agent.Response{}, c.deadErr
	case <-t.C:
		return agent.Response{}, ErrAgentUnresponsive
	case <-ctx.Done():
		return agent.Response{}, fmt.Errorf("sandbox: %s: %w", req.Op, context.Cause(ctx))
	}
}

// AgentError is the agent's refusal of a request (agent.OpError): the
// request was wrong or the session cannot do it, the container is fine.
type AgentError struct{ Msg string }

func (e *AgentError) Error() string { return "sandbox: agent: " + e.Msg }

func answer(resp agent.Response, want string) (agent.Response, error) {
	switch resp.Op {
	case want:
		return resp, nil
	case agent.OpError:
		return resp, &AgentError{Msg: resp.Error}
	}
	return resp, fmt.Errorf("sandbox: agent answered %q, want %q", resp.Op, want)
}

// StartSession starts the session's interpreter. An *AgentError means it
// did not start (the reason is the program's: its exit, its silence).
func (c *Container) StartSession(ctx context.Context, req *agent.SessionStart) error {
	resp, err := c.call(ctx, agent.Request{Op: agent.OpSessionStart, Session: req}, req.Driver.Timeout+Grace)
	if err != nil {
		return err
	}
	_, err = answer(resp, agent.OpSessionReady)
	return err
}

// Cell runs a cell. When ctx ends, the cell is interrupted (not killed)
// and its result still returned; live gets the cell's live output when
// the request asks for it. An error means the container is broken; what
// the cell did, its interpreter's death included, is in the result.
func (c *Container) Cell(ctx context.Context, req *agent.CellRequest, live func(agent.LiveChunk)) (agent.CellResult, error) {
	id := c.nextID.Add(1)
	ch := c.register(id, 16)
	defer c.unregister(id)
	if err := c.enc.Encode(agent.Request{ID: id, Op: agent.OpCell, Cell: req}); err != nil {
		return agent.CellResult{}, fmt.Errorf("%w: send: %v", ErrAgentGone, err)
	}
	backstop := time.NewTimer(req.Timeout + agent.InterruptGrace + Grace)
	defer backstop.Stop()
	ctxDone := ctx.Done()
	for {
		select {
		case resp := <-ch:
			switch resp.Op {
			case agent.OpLive:
				if live != nil && resp.Live != nil {
					live(*resp.Live)
				}
			case agent.OpCellResult:
				if resp.Cell == nil {
					return agent.CellResult{}, fmt.Errorf("sandbox: cell result without body")
				}
				return *resp.Cell, nil
			case agent.OpError:
				return agent.CellResult{}, &AgentError{Msg: resp.Error}
			}
		case <-ctxDone:
			ctxDone = nil
			_ = c.enc.Encode(agent.Request{ID: id, Op: agent.OpCancel})
			backstop.Reset(agent.InterruptGrace + Grace)
		case <-c.dead:
			return agent.CellResult{}, c.deadErr
		case <-backstop.C:
			return agent.CellResult{}, ErrAgentUnresponsive
		}
	}
}

// PutFile writes a file into the session's work dir.
func (c *Container) PutFile(ctx context.Context, f agent.File) error {
	resp, err := c.call(ctx, agent.Request{Op: agent.OpPutFile, File: &f}, 30*time.Second)
	if err == nil {
		_, err = answer(resp, agent.OpFileDone)
	}
	return err
}

// GetFile reads a regular file of the session's work dir.
func (c *Container) GetFile(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.call(ctx, agent.Request{Op: agent.OpGetFile, Path: path}, 30*time.Second)
	if err == nil {
		resp, err = answer(resp, agent.OpFileDone)
	}
	if err != nil {
		return nil, err
	}
	if resp.File == nil {
		return nil, fmt.Errorf("sandbox: get file: no file in the answer")
	}
	return resp.File.Data, nil
}

// ListFiles lists a directory of the session's work dir, recursively.
func (c *Container) ListFiles(ctx context.Context, dir string) ([]agent.FileInfo, error) {
	resp, err := c.call(ctx, agent.Request{Op: agent.OpListFiles, Path: dir}, 30*time.Second)
	if err == nil {
		resp, err = answer(resp, agent.OpFileDone)
	}
	return resp.Files, err
}
