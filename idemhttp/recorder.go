package idemhttp

import (
	"bytes"
	"net/http"
)

// recorder is the one ResponseWriter wrapper: it buffers the handler's
// response so that nothing reaches the client before the outcome is
// committed, and stops buffering at the snapshot cap. Unwrap gives
// http.ResponseController the client's writer for deadlines; Flush is a
// no-op, since flushing would send an uncommitted outcome.
type recorder struct {
	w        http.ResponseWriter
	header   http.Header
	status   int
	body     bytes.Buffer
	max      int
	overflow bool
}

func newRecorder(w http.ResponseWriter, max int) *recorder {
	return &recorder{w: w, header: http.Header{}, max: max}
}

func (rw *recorder) Header() http.Header { return rw.header }

func (rw *recorder) WriteHeader(status int) {
	if rw.status == 0 && status >= 200 {
		rw.status = status
	}
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	if rw.overflow || rw.body.Len()+len(p) > rw.max {
		rw.overflow = true
		return 0, errResponseTooLarge
	}
	return rw.body.Write(p)
}

func (rw *recorder) Flush() {}

func (rw *recorder) Unwrap() http.ResponseWriter { return rw.w }

func (rw *recorder) statusOrOK() int {
	if rw.status == 0 {
		return http.StatusOK
	}
	return rw.status
}

// reset drops whatever a panicking handler wrote.
func (rw *recorder) reset() {
	rw.header = http.Header{}
	rw.status = http.StatusInternalServerError
	rw.body.Reset()
}

// flushTo sends the recorded response to the client with extra headers.
func (rw *recorder) flushTo(w http.ResponseWriter, extra http.Header) {
	h := w.Header()
	for k, v := range rw.header {
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	w.WriteHeader(rw.statusOrOK())
	w.Write(rw.body.Bytes())
}
