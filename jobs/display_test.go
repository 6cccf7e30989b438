package jobs_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// A displayed value travels as one flat object, as interpreters send it
// and as results have always shown it; the typed bundle reads it back.
func TestDisplayJSON(t *testing.T) {
	t.Parallel()
	const flat = `{"artifact":"cells/c1/result-1.png","image/svg+xml":"<svg/>","text/plain":"<Figure>","url":"/x/p.png"}`
	var d jobs.Display
	require.NoError(t, json.Unmarshal([]byte(flat), &d))
	require.Equal(t, jobs.Display{Data: map[string]string{"image/svg+xml": "<svg/>", "text/plain": "<Figure>"},
		Artifact: "cells/c1/result-1.png", URL: "/x/p.png"}, d)
	b, err := json.Marshal(d)
	require.NoError(t, err)
	require.JSONEq(t, flat, string(b))

	text, ok := d.Text()
	require.True(t, ok)
	require.Equal(t, "<Figure>", text)
	require.Equal(t, []string{"image/svg+xml", "text/plain"}, d.Types())
	require.Equal(t, []jobs.DisplayImage{{Type: "image/svg+xml", Data: []byte("<svg/>")}}, d.Images())

	inline := jobs.Display{Data: map[string]string{"image/png": "iVBO\nRw0KGgo=", "image/jpeg": "!!"}}
	b, err = json.Marshal(inline)
	require.NoError(t, err)
	require.JSONEq(t, `{"image/jpeg":"!!","image/png":"iVBO\nRw0KGgo="}`, string(b), "no artifact keys when inline")
	require.Equal(t, []jobs.DisplayImage{{Type: "image/png", Data: []byte("\x89PNG\r\n\x1a\n")}}, inline.Images(),
		"base64 with line breaks decodes; an image that does not decode is left out")
	require.Equal(t, 8, inline.Size("image/png"))
	require.Equal(t, 2, inline.Size("image/jpeg"), "undecodable: its length as it is")
	_, ok = inline.Text()
	require.False(t, ok)
}
