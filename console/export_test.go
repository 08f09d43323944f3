package console

import (
	"net/http"
	"time"
)

// SetClock makes the console h, made by New, issue and check sessions and
// date lookup answers by now instead of time.Now. Call it before h serves
// its first request; now must be safe for concurrent use.
func SetClock(h http.Handler, now func() time.Time) {
	h.(*handler).now = now
}
