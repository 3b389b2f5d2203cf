// Package ui holds Corvo's web UI: the sources of a Preact + TypeScript
// single-page app (built with Vite) and, committed next to them, the built
// assets in dist/, embedded here so that a plain `go build` serves the UI
// with no Node toolchain. `make ui` rebuilds dist/ from the sources;
// `make ui-check` (part of `make test`) fails when the two differ.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Assets returns the built UI: index.html and assets/ (hashed file names).
func Assets() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded at build time; Sub of a valid name cannot fail
	}
	return sub
}
