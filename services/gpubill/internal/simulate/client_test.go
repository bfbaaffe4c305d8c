package simulate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An answer cut short is an error, not a success: a 200 whose body ends
// early says nothing reliable about what the stack did.
func TestClientAnswerCutShort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"ok":`)) // then the connection ends
	}))
	defer srv.Close()
	c := &client{base: srv.URL, token: "t", http: srv.Client()}
	if err := c.post(context.Background(), "/v1/deposits", map[string]string{"amount": "1.00"}, nil); err == nil {
		t.Fatal("a 200 cut short after 6 of 100 bytes was taken for a success")
	}
}
