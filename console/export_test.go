package console

import (
	"net/http"
	"time"
)

// SetClock makes the console h, made by New, check sessions against now
// instead of time.Now. Call it before h serves its first request; now
// must be safe for concurrent use.
func SetClock(h http.Handler, now func() time.Time) {
	h.(*handler).now = now
}
