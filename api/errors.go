package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// statuses maps the service's error kinds to HTTP statuses.
var statuses = map[service.Kind]int{
	service.Invalid:          http.StatusUnprocessableEntity,
	service.BadRequest:       http.StatusBadRequest,
	service.Unauthorized:     http.StatusUnauthorized,
	service.Forbidden:        http.StatusForbidden,
	service.NotFound:         http.StatusNotFound,
	service.Conflict:         http.StatusConflict,
	service.Gone:             http.StatusGone,
	service.TooLarge:         http.StatusRequestEntityTooLarge,
	service.UnsupportedMedia: http.StatusUnsupportedMediaType,
	service.TooMany:          http.StatusTooManyRequests,
	service.Unavailable:      http.StatusServiceUnavailable,
	service.Timeout:          http.StatusGatewayTimeout,
}

func errorAs(err error, e **service.Error) bool { return errors.As(err, e) }

// status is err's HTTP status: its kind's, or 500.
func status(err error) int {
	var e *service.Error
	if errorAs(err, &e) {
		if st, ok := statuses[e.Kind]; ok {
			return st
		}
	}
	return http.StatusInternalServerError
}

// detail is err's problem detail: the service's message.
func detail(err error) string {
	var e *service.Error
	if errorAs(err, &e) {
		return e.Msg
	}
	return err.Error()
}

// details are err's problem's errors: the offending input (its location,
// the rule it broke, its value), and the cause.
func details(err error) []error {
	var e *service.Error
	if !errorAs(err, &e) {
		return nil
	}
	var out []error
	if (e.Kind == service.Invalid || e.Kind == service.Gone) && (e.Detail != "" || e.Location() != "") {
		out = append(out, &huma.ErrorDetail{Location: e.Location(), Message: e.Detail, Value: e.Value})
	}
	if e.Kind == service.TooMany && e.Quota != "" {
		out = append(out, &huma.ErrorDetail{Location: "quota", Message: "the quota reached", Value: e.Quota})
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// problem maps an error of the service to the API's answer: an RFC 9457
// problem with the kind's status, and Retry-After when the service says
// when to try again. Other errors (the request's context ending) pass
// through.
func problem(err error) error {
	if err == nil {
		return nil
	}
	var e *service.Error
	if !errorAs(err, &e) {
		return err
	}
	herr := huma.NewError(status(err), e.Msg, details(err)...)
	if e.RetryAfter > 0 {
		return huma.ErrorWithHeaders(herr, http.Header{"Retry-After": {retryAfter(e.RetryAfter)}})
	}
	return herr
}

// at sets where in the request the offending input of an Invalid error
// is, then maps it (problem).
func at(err error, where string) error {
	var e *service.Error
	if errorAs(err, &e) && e.Where == "" {
		e.Where = where
	}
	return problem(err)
}

// retryAfter formats a duration for a Retry-After header, in whole
// seconds, at least 1.
func retryAfter(d time.Duration) string { return strconv.Itoa(int(max(d.Seconds(), 1))) }

// problemType is every problem's type: RFC 9457's about:blank, whose title
// is the status's phrase. It is written out, not left implied.
const problemType = "about:blank"

func init() {
	// Every problem huma writes (the operations', its own validation's)
	// carries its type; a body that is not JSON says so.
	huma.NewError = newProblem
}

// newProblem is huma's error constructor with the API's rules: the type
// is written out, and a body huma could not parse (a 400 it calls
// "validation failed", the body echoed as the value) is a 400 that says
// the body is not JSON and echoes nothing.
func newProblem(status int, msg string, errs ...error) huma.StatusError {
	m := &huma.ErrorModel{Type: problemType, Title: http.StatusText(status), Status: status, Detail: msg}
	more := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		if len(m.Errors) == maxProblemErrors {
			more++
			continue
		}
		switch e := err.(type) {
		case huma.ErrorDetailer:
			d := *e.ErrorDetail()
			d.Value = boundValue(d.Value)
			m.Errors = append(m.Errors, &d)
		default:
			m.Errors = append(m.Errors, &huma.ErrorDetail{Message: err.Error()})
		}
	}
	if more > 0 {
		m.Errors = append(m.Errors, &huma.ErrorDetail{Message: fmt.Sprintf("and %d more errors", more)})
	}
	if status == http.StatusBadRequest && msg == "validation failed" && len(m.Errors) == 1 && m.Errors[0].Location == "body" {
		m.Detail = "the body is not valid JSON: " + m.Errors[0].Message
		m.Errors[0] = &huma.ErrorDetail{Location: "body", Message: m.Errors[0].Message}
	}
	return m
}

// maxProblemErrors bounds the errors a problem lists. huma's validation
// reports every unknown property of an object, each with the whole object
// as its value: a body of N unknown fields would otherwise be answered with
// N copies of itself (quadratic in memory and time for the API).
const maxProblemErrors = 20

// maxProblemValue bounds a string value a problem echoes, in bytes.
const maxProblemValue = 256

// boundValue is the value a problem's error echoes: a scalar as it is (a
// string cut to maxProblemValue bytes at a rune boundary), nothing for an
// object or array, which the error's location already points into.
func boundValue(v any) any {
	if v == nil {
		return nil
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return v
	case reflect.String: // a named string type (a status, a state) too
		x := rv.String()
		if len(x) <= maxProblemValue {
			return v
		}
		return jobs.Head(x, maxProblemValue) + "…"
	default:
		return nil
	}
}

// writeRouteProblem writes the problem of a request no operation takes:
// 404 for an unknown path, 405 with Allow for a known path's other
// methods, 400 for a path that is not clean.
func writeRouteProblem(w http.ResponseWriter, code int, detail string) {
	b, _ := json.Marshal(&huma.ErrorModel{Type: problemType, Title: http.StatusText(code), Status: code, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
