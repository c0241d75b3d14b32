// Package mdexamples runs the examples of the Markdown pages as written:
// it reads a page's fenced blocks, splits their shell lines into words as
// a shell would, runs curl's lines (the subset the pages use) over
// net/http, and matches a transcript's output against what a command
// printed, with its numbers and durations free and its reservation
// tokens bound to the real ones. The tests that use it start the cluster
// the page speaks of and run its other commands themselves.
package mdexamples

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
)

// Block is one fenced block of a page.
type Block struct {
	Info  string   // the fence's info string: "sh", "json", "" …
	Lines []string // its lines, without the fences
	Line  int      // the line of the opening fence, from 1
	// Follows reports that only blank lines separate it from the block
	// before: a page shows a command's output so.
	Follows bool
}

// Blocks returns the fenced (```) blocks of a Markdown page, in order.
func Blocks(md string) []Block {
	var out []Block
	var cur *Block
	blankSince := true // only blank lines since the last block closed
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &Block{Info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), Line: i + 1,
				Follows: blankSince && len(out) > 0}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur, blankSince = nil, true
		case cur != nil:
			cur.Lines = append(cur.Lines, line)
		case trimmed != "":
			blankSince = false
		}
	}
	return out
}

// Split splits a shell line into words: single and double quotes,
// backslash escapes outside single quotes, and a comment from an unquoted
// "#" that starts a word. Variables, globs and pipes are not the pages'
// business, and are refused: a page that needs them needs another runner.
func Split(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == ' ' || ch == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case ch == '#' && !inWord:
			return words, nil
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", line)
			}
			w.WriteString(line[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case ch == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				} else if line[i] == '$' || line[i] == '`' {
					return nil, fmt.Errorf("expansion in %q: not supported", line)
				}
				w.WriteByte(line[i])
			}
			if i == len(line) {
				return nil, fmt.Errorf("unclosed \" in %q", line)
			}
			inWord = true
		case ch == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case strings.IndexByte("|&;<>$`*?(){}", ch) >= 0:
			return nil, fmt.Errorf("%q: %q is shell syntax this runner does not run", line, ch)
		default:
			w.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// Curl runs curl's command line args (without "curl") over hc: the
// flags -s, -S, -N (no effect here), -i (print the status line and
// headers), -d DATA (POST, as curl sends it), -H "Name: value" and
// -X METHOD, and one URL, "http://" when it has no scheme. It returns
// what curl prints and the response's status; an error is a command
// line it does not know, or no answer.
func Curl(ctx context.Context, hc *http.Client, args []string) (string, int, error) {
	c, err := parseCurl(args)
	if err != nil {
		return "", 0, err
	}
	req, err := c.request(ctx)
	if err != nil {
		return "", 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("curl %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	out, err := printed(resp, c.include)
	if err != nil {
		return "", 0, fmt.Errorf("curl %s: %w", c.url, err)
	}
	return out, resp.StatusCode, nil
}

// curlCmd is a curl command line as Curl understands it.
type curlCmd struct {
	url, method, data string
	hasData, include  bool
	hdr               http.Header
}

// parseCurl reads curl's arguments (without "curl").
func parseCurl(args []string) (curlCmd, error) {
	c := curlCmd{hdr: http.Header{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("curl %s: wants a value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch {
		case a == "-d" || a == "--data":
			c.data, err = next()
			c.hasData = true
		case a == "-H" || a == "--header":
			var h string
			if h, err = next(); err == nil {
				k, v, ok := strings.Cut(h, ":")
				if !ok {
					return c, fmt.Errorf("curl -H %q: not Name: value", h)
				}
				c.hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		case a == "-X" || a == "--request":
			c.method, err = next()
		case strings.HasPrefix(a, "-") && len(a) > 1 && !strings.HasPrefix(a, "--"):
			err = c.shortFlags(a)
		case strings.HasPrefix(a, "-"):
			return c, fmt.Errorf("curl %s: flag not supported by this runner", a)
		case c.url != "":
			return c, fmt.Errorf("curl: two URLs, %q and %q", c.url, a)
		default:
			c.url = a
		}
		if err != nil {
			return c, err
		}
	}
	if c.url == "" {
		return c, errors.New("curl: no URL")
	}
	return c, nil
}

// shortFlags takes a group of one-letter flags (-sS, -i).
func (c *curlCmd) shortFlags(a string) error {
	for _, f := range a[1:] {
		switch f {
		case 's', 'S', 'N':
		case 'i':
			c.include = true
		default:
			return fmt.Errorf("curl %s: flag not supported by this runner", a)
		}
	}
	return nil
}

// request is the HTTP request c sends: a POST with -d unless -X says
// otherwise, form-encoded unless a header says otherwise, as curl does.
func (c curlCmd) request(ctx context.Context) (*http.Request, error) {
	url := c.url
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	method := c.method
	if method == "" {
		method = http.MethodGet
		if c.hasData {
			method = http.MethodPost
		}
	}
	var body io.Reader
	if c.hasData {
		body = strings.NewReader(c.data)
		if c.hdr.Get("Content-Type") == "" {
			c.hdr.Set("Content-Type", "application/x-www-form-urlencoded") // as curl -d does
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, fmt.Errorf("curl %s: %w", url, err)
	}
	req.Header = c.hdr
	return req, nil
}

// printed is what curl prints of resp: its body, after the status line
// and the headers (sorted) with -i.
func printed(resp *http.Response, include bool) (string, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading the body: %w", err)
	}
	var out bytes.Buffer
	if include {
		fmt.Fprintf(&out, "%s %s\n", resp.Proto, resp.Status)
		keys := make([]string, 0, len(resp.Header))
		for k := range resp.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for _, v := range resp.Header[k] {
				fmt.Fprintf(&out, "%s: %s\n", k, v)
			}
		}
		out.WriteString("\n")
	}
	out.Write(b)
	return out.String(), nil
}

// Step is one command of a transcript and the output the page shows.
type Step struct {
	Command string   // without its "$ "
	Want    []string // the lines the page shows after it
}

// Transcript reads a block of "$ command" lines, each followed by its
// output; ok is false when the block is not one (its first line is not a
// command).
func Transcript(lines []string) ([]Step, bool) {
	var steps []Step
	for _, l := range lines {
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			steps = append(steps, Step{Command: cmd})
		} else if len(steps) == 0 {
			return nil, false
		} else {
			steps[len(steps)-1].Want = append(steps[len(steps)-1].Want, l)
		}
	}
	return steps, len(steps) > 0
}

// tokenRe is a reservation token as the pages show it (51 characters of
// base64url): bound, not compared.
var tokenRe = regexp.MustCompile(`[A-Za-z0-9_-]{40,}`)

// numRe is a number or a Go duration ("59.953s", "1m0s", "195").
var numRe = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)?(?:ns|µs|ms|s|m|h)?(?:[0-9]+(?:\.[0-9]+)?(?:ns|µs|ms|s|m|h))*`)

// Tokens returns the reservation tokens in s, in order.
func Tokens(s string) []string { return tokenRe.FindAllString(s, -1) }

// Match reports whether got, a command's output, is what want shows:
// line by line, runs of spaces as any run of spaces (tables align to
// their widths), every number or duration that stands alone ("(count 5
// of 5)", "59.953s", "×89") as any number or duration, and each
// reservation token as any, recorded in bind (the page's token → the
// real one) for the commands after it; the rest literally.
func Match(want []string, got string, bind map[string]string) error {
	var gotLines []string
	sc := bufio.NewScanner(strings.NewReader(strings.TrimRight(got, "\n")))
	for sc.Scan() {
		gotLines = append(gotLines, strings.TrimRight(sc.Text(), " "))
	}
	if len(gotLines) != len(want) {
		return fmt.Errorf("%d lines, the page shows %d:\n%s", len(gotLines), len(want), got)
	}
	for i, w := range want {
		re, toks := linePattern(strings.TrimRight(w, " "))
		m := re.FindStringSubmatch(gotLines[i])
		if m == nil {
			return fmt.Errorf("line %d is\n\t%s\nthe page shows\n\t%s", i+1, gotLines[i], w)
		}
		for j, tok := range toks {
			bind[tok] = m[j+1]
		}
	}
	return nil
}

// linePattern is the expression a shown line stands for, and the tokens
// its groups capture, in order.
func linePattern(line string) (*regexp.Regexp, []string) {
	var b strings.Builder
	var toks []string
	b.WriteString("^")
	for len(line) > 0 {
		if loc := tokenRe.FindStringIndex(line); loc != nil && loc[0] == 0 {
			toks = append(toks, line[:loc[1]])
			b.WriteString(`([A-Za-z0-9_-]{40,})`)
			line = line[loc[1]:]
			continue
		}
		if loc := numRe.FindStringIndex(line); loc != nil && loc[0] == 0 && standsAlone(b.String(), line[loc[1]:]) {
			b.WriteString(`[0-9][0-9.a-zµ]*`)
			line = line[loc[1]:]
			continue
		}
		if line[0] == ' ' {
			b.WriteString(` +`)
			line = strings.TrimLeft(line, " ")
			continue
		}
		// One literal word piece: up to the next space or digit.
		n := strings.IndexAny(line[1:], " 0123456789")
		if n < 0 {
			n = len(line) - 1
		}
		b.WriteString(regexp.QuoteMeta(line[:n+1]))
		line = line[n+1:]
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String()), toks
}

// standsAlone reports whether a number between the pattern built so far
// (its last character is the number's left neighbour, as a quoted
// literal) and rest is a value of its own, not part of a name or an
// address ("node1", "user:42", "127.0.0.1:9090"): after a space, "(",
// "×", "=" or a JSON key's `":`, and before a space, punctuation or the
// end.
func standsAlone(before, rest string) bool {
	left := before[len(before)-1:]
	if strings.HasSuffix(before, " +") || before == "^" {
		left = " "
	}
	switch {
	case strings.HasSuffix(before, "×"):
		left = "×"
	case strings.HasSuffix(before, `":`): // a JSON value
		left = " "
	}
	if !strings.Contains(" (×=", left) {
		return false
	}
	return rest == "" || strings.ContainsAny(rest[:1], " ,;:)}")
}
