package gateway

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"mime"
	"path"
	"regexp"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/ui"
)

// The web UI: the embedded single-page app under /ui/. Files under
// /ui/assets/ have content hashes in their names and are cached for a year
// (immutable); index.html is revalidated on every load (no-cache + ETag).
// Any other path under /ui/ is a client-side route and gets index.html.

type uiFile struct {
	body, gz    []byte // gz is nil when compressing does not pay
	contentType string
	etag        string
	immutable   bool
}

type uiFiles struct {
	files map[string]*uiFile // "index.html", "assets/index-abc.js", …
	index *uiFile
	csp   string // the Content-Security-Policy of every UI response
}

// inlineScript finds index.html's inline scripts (the theme set before the
// first paint): the policy allows exactly them, by hash.
var inlineScript = regexp.MustCompile(`(?s)<script>(.*?)</script>`)

// contentSecurityPolicy is the UI's policy: everything from this origin
// only; scripts from files plus the inline ones index.html holds, by their
// SHA-256 (never 'unsafe-inline' for scripts); inline style attributes
// (the progress bars set widths); data: images (the favicon); no plugins,
// no <base>, no framing by other sites.
func contentSecurityPolicy(index []byte) string {
	script := "'self'"
	for _, m := range inlineScript.FindAllSubmatch(index, -1) {
		sum := sha256.Sum256(m[1])
		script += " 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'self'; script-src " + script + "; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
		"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}

var (
	uiOnce   sync.Once
	uiLoaded *uiFiles
)

// uiAssets loads and compresses the embedded files once, on first use.
func uiAssets() *uiFiles {
	uiOnce.Do(func() { uiLoaded = loadUIFiles(ui.Assets()) })
	return uiLoaded
}

func loadUIFiles(fsys fs.FS) *uiFiles {
	u := &uiFiles{files: map[string]*uiFile{}}
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := &uiFile{
			body:        body,
			contentType: mime.TypeByExtension(path.Ext(p)),
			etag:        `"` + hex.EncodeToString(sum[:8]) + `"`,
			immutable:   strings.HasPrefix(p, "assets/"),
		}
		if f.contentType == "" {
			f.contentType = "application/octet-stream"
		}
		if len(body) > 512 {
			var b bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
			_, _ = zw.Write(body)
			_ = zw.Close()
			if b.Len() < len(body)*9/10 {
				f.gz = b.Bytes()
			}
		}
		u.files[p] = f
		return nil
	})
	u.index = u.files["index.html"]
	if u.index != nil {
		u.csp = contentSecurityPolicy(u.index.body)
	}
	return u
}

// uiSecurityHeaders are on every UI response: the policy, no MIME
// sniffing, no framing, no referrer beyond this origin.
func uiSecurityHeaders(h *fasthttp.ResponseHeader, csp string) {
	if csp != "" {
		h.Set("Content-Security-Policy", csp)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
}

// handleUIRedirect sends / to /ui/.
func (s *Server) handleUIRedirect(ctx *fasthttp.RequestCtx) {
	uiSecurityHeaders(&ctx.Response.Header, uiAssets().csp)
	ctx.Response.Header.Set("Location", "/ui/")
	ctx.SetStatusCode(fasthttp.StatusFound)
}

// uiRedirect sends GET /ui to /ui/ (the router cannot hold both /ui and the
// /ui/{filepath:*} catch-all, so the not-found handler asks here first).
func uiRedirect(ctx *fasthttp.RequestCtx) bool {
	if string(ctx.Path()) != "/ui" || !ctx.IsGet() && !ctx.IsHead() {
		return false
	}
	uiSecurityHeaders(&ctx.Response.Header, uiAssets().csp)
	ctx.Response.Header.Set("Location", "/ui/")
	ctx.SetStatusCode(fasthttp.StatusFound)
	return true
}

func (s *Server) handleUI(ctx *fasthttp.RequestCtx) {
	serveUI(ctx, uiAssets())
}

func serveUI(ctx *fasthttp.RequestCtx, u *uiFiles) {
	uiSecurityHeaders(&ctx.Response.Header, u.csp)
	p, _ := ctx.UserValue("filepath").(string)
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	f := u.files[p]
	if f == nil {
		if p == "assets" || strings.HasPrefix(p, "assets/") || looksLikeFile(p) {
			writeError(ctx, codeNotFound.err("no such file: /ui/"+p))
			return
		}
		f = u.index // a client-side route
	}
	if f == nil {
		writeError(ctx, codeNotFound.err("this build has no UI"))
		return
	}
	h := &ctx.Response.Header
	h.Set("Content-Type", f.contentType)
	h.Set("ETag", f.etag)
	h.Set("Vary", "Accept-Encoding")
	if f.immutable {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	if inm := ctx.Request.Header.Peek("If-None-Match"); len(inm) > 0 && bytes.Contains(inm, []byte(f.etag)) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	if f.gz != nil && ctx.Request.Header.HasAcceptEncoding("gzip") {
		h.Set("Content-Encoding", "gzip")
		ctx.SetBody(f.gz)
		return
	}
	ctx.SetBody(f.body)
}

// looksLikeFile: a last segment with a short alphanumeric extension
// ("logo.png", "main.js") names a file; route parameters such as a job ID
// or a queue name with dots ("emails.send") do not reach here as files
// because queue and job pages live under /ui/queues/ and /ui/jobs/.
func looksLikeFile(p string) bool {
	first := strings.SplitN(p, "/", 2)[0]
	switch first {
	case "queues", "jobs":
		return false
	}
	ext := strings.TrimPrefix(path.Ext(p), ".")
	if len(ext) == 0 || len(ext) > 5 {
		return false
	}
	for _, c := range ext {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
