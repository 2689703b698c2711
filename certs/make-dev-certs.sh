#!/usr/bin/env bash
# Makes development-only keys and certificates in this folder (never real secrets; all git-ignored):
#   ca.pem / ca-key.pem         a throwaway dev CA
#   localhost.pem / localhost-key.pem   a server certificate for localhost, 127.0.0.1 and ::1
#   apns-test.p8                a P-256 PKCS#8 key in Apple's .p8 format (for the mock APNs)
#   fcm-test-service-account.json   a service-account JSON with an RSA key (token_uri points at the mock)
# Needs only the openssl command line tool.
set -euo pipefail
cd "$(dirname "$0")"
days=825
if [ ! -f ca.pem ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out ca-key.tmp
  openssl pkcs8 -topk8 -nocrypt -in ca-key.tmp -out ca-key.pem && rm ca-key.tmp
  openssl req -x509 -new -key ca-key.pem -sha256 -days "$days" -subj "/CN=Pushgate Dev CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
fi
if [ ! -f localhost.pem ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out localhost-key.tmp
  openssl pkcs8 -topk8 -nocrypt -in localhost-key.tmp -out localhost-key.pem && rm localhost-key.tmp
  openssl req -new -key localhost-key.pem -subj "/CN=localhost" -out localhost.csr
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > localhost.ext
  openssl x509 -req -in localhost.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" -sha256 \
    -extfile localhost.ext -out localhost.pem
  rm -f localhost.csr localhost.ext ca.srl
fi
if [ ! -f apns-test.p8 ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out apns.tmp
  openssl pkcs8 -topk8 -nocrypt -in apns.tmp -out apns-test.p8 && rm apns.tmp
fi
if [ ! -f fcm-test-service-account.json ]; then
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out fcm.tmp 2>/dev/null
  python3 - "$PWD/fcm.tmp" > fcm-test-service-account.json <<'PY'
import json, sys
key = open(sys.argv[1]).read()
print(json.dumps({
  "type": "service_account", "project_id": "pushgate-dev", "private_key_id": "dev-key-1",
  "private_key": key, "client_email": "pushgate-dev@pushgate-dev.iam.gserviceaccount.com",
  "client_id": "1", "token_uri": "https://127.0.0.1:8445/token",
}, indent=2))
PY
  rm fcm.tmp
fi
echo "dev certificates and keys are in $(pwd)"
ls -1 ca.pem localhost.pem localhost-key.pem apns-test.p8 fcm-test-service-account.json
