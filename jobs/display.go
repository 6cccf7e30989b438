package jobs

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Display is one value a cell displayed, as a MIME bundle: each type's
// content, binary types (image/png) in standard base64. A bundle has
// "text/plain" unless it is an image alone. A value too large to keep
// inline was moved to the artifact store: Artifact names it (as in
// [CellResult].Artifacts) and URL locates it, and Data keeps only the
// bundle's small types.
//
// In JSON a Display is one flat object, types and the two names side by
// side: {"text/plain": "<Figure>", "artifact": "cells/c1/result-1.png",
// "url": "..."}.
type Display struct {
	// Data maps a MIME type to its content.
	Data map[string]string
	// Artifact and URL name and locate the artifact the value was moved
	// to; empty when it is inline.
	Artifact, URL string
}

// Display's JSON names of the artifact fields, beside the MIME types.
const (
	displayArtifact = "artifact"
	displayURL      = "url"
)

// MarshalJSON writes the flat object.
func (d Display) MarshalJSON() ([]byte, error) {
	m := make(map[string]string, len(d.Data)+2)
	maps.Copy(m, d.Data)
	if d.Artifact != "" {
		m[displayArtifact] = d.Artifact
	}
	if d.URL != "" {
		m[displayURL] = d.URL
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the flat object.
func (d *Display) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*d = DisplayOf(m)
	return nil
}

// DisplayOf makes a Display of a flat bundle as interpreters send it
// (types, and maybe "artifact" and "url").
func DisplayOf(bundle map[string]string) Display {
	d := Display{Data: make(map[string]string, len(bundle))}
	for k, v := range bundle {
		switch k {
		case displayArtifact:
			d.Artifact = v
		case displayURL:
			d.URL = v
		default:
			d.Data[k] = v
		}
	}
	return d
}

// Text returns the bundle's text/plain.
func (d Display) Text() (string, bool) {
	t, ok := d.Data["text/plain"]
	return t, ok
}

// Types returns the bundle's MIME types, sorted.
func (d Display) Types() []string { return slices.Sorted(maps.Keys(d.Data)) }

// ImageTypes are the image types a renderer shows, in its order of
// preference.
var ImageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml"}

// Images returns the bundle's images in the order of [ImageTypes], their
// bytes decoded (an SVG is text; the others are base64, and one that does
// not decode is left out).
func (d Display) Images() []DisplayImage {
	var out []DisplayImage
	for _, t := range ImageTypes {
		v, ok := d.Data[t]
		if !ok {
			continue
		}
		data := []byte(v)
		if t != "image/svg+xml" {
			var err error
			if data, err = decodeBase64(v); err != nil {
				continue
			}
		}
		out = append(out, DisplayImage{Type: t, Data: data})
	}
	return out
}

// DisplayImage is one image of a [Display].
type DisplayImage struct {
	Type string
	Data []byte
}

// Size returns the size in bytes of the bundle's content of type t: text
// types as they are, others (images, PDF) decoded from base64 (as they are
// when they do not decode).
func (d Display) Size(t string) int {
	v := d.Data[t]
	if strings.HasPrefix(t, "text/") || strings.HasSuffix(t, "+xml") || strings.HasSuffix(t, "json") || strings.HasSuffix(t, "javascript") {
		return len(v)
	}
	if b, err := decodeBase64(v); err == nil {
		return len(b)
	}
	return len(v)
}

// decodeBase64 decodes standard base64, white space ignored.
func decodeBase64(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
}
