// A minimal Go net/http HTTP/2 TLS server answering 200 to every POST: a provider stand-in with the
// stack of many real services (Go's defaults: 250 concurrent streams per connection, its window
// updates and frame sizes), nothing written for Pushgate. The body is read and dropped; an APNs
// request's apns-id is echoed as APNs does.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "listen address")
	cert := flag.String("cert", "cert.pem", "server certificate (PEM)")
	key := flag.String("key", "key.pem", "server key (PEM)")
	flag.Parse()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if id := r.Header.Get("apns-id"); id != "" {
			w.Header().Set("apns-id", id)
		}
		w.WriteHeader(200)
	})
	log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, nil))
}
