package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	n := flag.Int("n", 100000, "")
	c := flag.Int("c", 100, "concurrent in-flight")
	url := flag.String("url", "https://127.0.0.1:8443/3/device/", "")
	ca := flag.String("ca", "../cert.pem", "")
	payloadPath := flag.String("payload", "../payload.json", "")
	// Added to the reference client (../shared/bench/goclient): the provider token and topic, so
	// that the strict mock APNs (which verifies every ES256 JWT) answers 200; and a 200 counts only over HTTP/2
	// (the "proto check" its output names). Nothing else changed.
	auth := flag.String("auth", "bearer eyJhbGciOiJFUzI1NiJ9.e30.sig", "authorization header")
	topic := flag.String("topic", "com.example.app", "apns-topic header")
	// Added for FCM (bench/bench-references.sh): -fixed posts every request to
	// -url as given (e.g. https://127.0.0.1:28444/v1/projects/<project>/messages:send) instead of
	// appending a %064x device token to the URL; the payload file is then a format string whose one
	// %064x is replaced by the request's sequence number (each message its own 64-hex token in the
	// JSON body, as FCM v1 takes it: {"message":{"token":"%064x",...}}), the request carries
	// content-type: application/json (the mock FCM refuses other types, as FCM does) and no apns-*
	// headers. Pass the OAuth access token with -auth "Bearer ya29...". Without -fixed nothing changes.
	fixed := flag.Bool("fixed", false, "POST to -url as is; payload is a fmt template with one %064x token (FCM v1)")
	flag.Parse()
	pem, _ := os.ReadFile(*ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	payload, _ := os.ReadFile(*payloadPath)
	var next, ok, fail int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < *c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1)
				if i > int64(*n) { return }
				var req *http.Request
				if *fixed {
					// -fixed (FCM): fixed URL, the token in the JSON body, JSON content type.
					req, _ = http.NewRequest("POST", *url, bytes.NewReader([]byte(fmt.Sprintf(string(payload), i))))
					req.Header.Set("content-type", "application/json")
				} else {
					req, _ = http.NewRequest("POST", fmt.Sprintf("%s%064x", *url, i), bytes.NewReader(payload))
					req.Header.Set("apns-push-type", "alert")
					req.Header.Set("apns-topic", *topic)
				}
				req.Header.Set("authorization", *auth)
				resp, err := client.Do(req)
				if err != nil { atomic.AddInt64(&fail, 1); continue }
				io.Copy(io.Discard, resp.Body); resp.Body.Close()
				if resp.StatusCode == 200 && resp.ProtoMajor == 2 { atomic.AddInt64(&ok, 1) } else { atomic.AddInt64(&fail, 1) }
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	fmt.Printf("go-nethttp-h2: %d ok %d fail in %.2fs = %.0f req/s (proto check)\n", ok, fail, el, float64(ok)/el)
}
