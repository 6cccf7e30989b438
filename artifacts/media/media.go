// Package media says what an artifact is and how it may be served: its
// content type, and whether it must be a download. It imports nothing but
// the standard library, so the HTTP API serves artifacts without linking a
// storage SDK.
package media

import (
	"mime"
	"path"
	"strings"
)

// ContentType guesses from the name's extension; unknown is
// application/octet-stream.
func ContentType(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".png":
		return "image/png"
	case ".svg":
		return "image/svg+xml"
	case ".html", ".htm":
		return "text/html; charset=utf-8"
	case ".csv":
		return "text/csv; charset=utf-8"
	case ".json":
		return "application/json"
	case ".txt", ".log", ".md":
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// Attachment reports whether an artifact must be served as a download
// (Content-Disposition: attachment) rather than shown: a browser runs the
// scripts in an HTML, SVG or other XML document as a page of whatever
// origin serves it, and a job's output is untrusted. contentType may be
// empty; it is then guessed from name. The S3 store stores such objects
// with the header and asks for it in presigned URLs; files of the local
// store carry no headers, so whoever serves them over HTTP must send
// "Content-Disposition: attachment" (and X-Content-Type-Options: nosniff)
// when this says so.
func Attachment(name, contentType string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".html", ".htm", ".xhtml", ".xht", ".shtml", ".mht", ".mhtml",
		".svg", ".svgz", ".xml", ".xsl", ".xslt":
		return true
	}
	if contentType == "" {
		contentType = ContentType(name)
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return true // unparsable: the browser may sniff it; do not let it
	}
	switch {
	case mt == "text/html", mt == "text/xml", mt == "application/xml",
		strings.HasSuffix(mt, "+xml"): // image/svg+xml, application/xhtml+xml, ...
		return true
	}
	return false
}
