package service

import (
	"errors"
	"fmt"
	"time"
)

// Kind is what went wrong, in terms every door maps: the API to an HTTP
// status, MCP to a tool error's text, the CLI to an exit status.
type Kind int

const (
	// Invalid: the request breaks a rule (422). Field and Value name it.
	Invalid Kind = iota + 1
	// BadRequest: the request cannot be read (400).
	BadRequest
	// Unauthorized: no valid API key (401).
	Unauthorized
	// Forbidden: the key lacks a scope (403).
	Forbidden
	// NotFound: the caller has no such job, batch, session or artifact
	// (404), whether or not another tenant has one.
	NotFound
	// Conflict: the caller has one of that ID already, or it has ended
	// and cannot be changed (409).
	Conflict
	// Gone: the session has ended (410); State and Reason say how.
	Gone
	// TooLarge: the request passes a size cap (413).
	TooLarge
	// UnsupportedMedia: the request's body is of a type refused (415).
	UnsupportedMedia
	// TooMany: a rate or quota of the caller is reached (429);
	// RetryAfter says when to try again.
	TooMany
	// Unavailable: sandq cannot answer now (503): Redis failing, no
	// session slot, a process's cap on streams. RetryAfter, when set,
	// says when to try again.
	Unavailable
	// Timeout: a worker did not answer in time (504).
	Timeout
)

// The quotas a TooMany refusal names (Error.Quota), each counted per
// tenant (Service.Refusals).
const (
	QuotaJobs        = "jobs"         // jobs not yet final
	QuotaBytes       = "bytes"        // bytes held by jobs not yet final
	QuotaSessions    = "sessions"     // sessions open
	QuotaRate        = "rate"         // requests per second
	QuotaStreams     = "streams"      // live-output followers in this process
	QuotaDownloads   = "downloads"    // downloads in this process
	QuotaMCPSessions = "mcp_sessions" // MCP sessions in this process
)

var kindNames = map[Kind]string{Invalid: "invalid", BadRequest: "bad request", Unauthorized: "unauthorized",
	Forbidden: "forbidden", NotFound: "not found", Conflict: "conflict", Gone: "gone", TooLarge: "too large", UnsupportedMedia: "unsupported media type",
	TooMany: "too many requests", Unavailable: "unavailable", Timeout: "timeout"}

func (k Kind) String() string { return kindNames[k] }

// Error is a failure of a request, typed for the doors. Its message is
// what the caller reads: IDs as the caller knows them, no other tenant's
// names.
type Error struct {
	Kind Kind
	// Msg says what happened, for the caller.
	Msg string
	// Field is the offending input's path for Invalid, relative to the
	// request's own ("tenant", "limits.memory_mb", "files[2].path"); Where
	// is the request's part it sits in ("body", "body[3]", "path.path",
	// "query.dir"), set by the operation. Value is the offending value.
	Where, Field string
	Value        any
	// Detail is the rule broken, for Invalid (the message of a
	// jobs.ValidationError), or the state's reason, for Gone.
	Detail string
	// RetryAfter, for TooMany and Unavailable, is when to try again.
	RetryAfter time.Duration
	// Quota names the quota a TooMany refusal reached: one of the
	// Quota* names.
	Quota string
	// Err is the cause, when there is one (Redis's error, say).
	Err error
}

func (e *Error) Error() string {
	msg := e.Msg
	if e.Detail != "" && e.Kind == Invalid {
		loc := e.Location()
		if loc != "" {
			msg += ": " + loc + ": " + e.Detail
		} else {
			msg += ": " + e.Detail
		}
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Location is Where and Field joined: where in the request the offending
// input is.
func (e *Error) Location() string {
	switch {
	case e.Where == "":
		return e.Field
	case e.Field == "":
		return e.Where
	}
	return e.Where + "." + e.Field
}

func newError(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// unavailable is sandq failing to answer: Redis, mostly.
func unavailable(msg string, err error) *Error {
	return &Error{Kind: Unavailable, Msg: msg, Err: err}
}

// KindOf returns err's Kind, 0 when err is no *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// at sets where the request's input is, for an Invalid error, and returns
// err.
func at(err error, where string) error {
	var e *Error
	if errors.As(err, &e) && e.Where == "" {
		e.Where = where
	}
	return err
}
