package cli

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressThrottle bounds how often the bar redraws.
const progressThrottle = 100 * time.Millisecond

// progress shows a long export's advance on a terminal: a spinner while the
// report is computed, then a bar over the client lines as they are
// rendered. On anything but a terminal (a pipe, a file, CI) it is silent.
type progress struct {
	w    io.Writer
	bar  *progressbar.ProgressBar
	done bool
}

func newProgress(stderr io.Writer) *progress {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return &progress{}
	}
	p := &progress{w: f}
	p.bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("computing the report"),
		progressbar.OptionSpinnerType(14), progressbar.OptionThrottle(progressThrottle), progressbar.OptionClearOnFinish())
	return p
}

// lines is the renderer's callback: done of total client lines written.
func (p *progress) lines(done, total int) {
	if p.w == nil || p.done {
		return
	}
	if p.bar.GetMax() != total {
		_ = p.bar.Finish()
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription("client lines"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(progressThrottle), progressbar.OptionClearOnFinish())
	}
	_ = p.bar.Set(done)
}

func (p *progress) finish() {
	if p.w == nil || p.done {
		return
	}
	p.done = true
	_ = p.bar.Finish()
}
