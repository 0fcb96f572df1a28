#!/usr/bin/env bash
# A throwaway certificate authority and certificates signed by it, for local HTTPS (never for a
# real deployment): `Deploy/cluster.sh up --tls`, `Deploy/citus/cluster.sh up --tls` and the
# HTTPS checks (Deploy/tls/e2e.sh) use it.
#
#   Deploy/tls/make-certs.sh DIR [HOST...]
#
# Writes into DIR (created; nothing is overwritten that exists):
#   ca.pem, ca.key                 the authority (trust ca.pem in the client: curl --cacert ca.pem)
#   server.pem, server.key         for localhost, 127.0.0.1, ::1 and each HOST, valid 30 days
#   server-b.pem, server-b.key     the same names, another key (a renewal, for reload checks)
#   expired.pem, expired.key       the same names, expired in 2020
#   wrong-host.pem, wrong-host.key for elsewhere.example only
#   combined.pem                   server.pem then server.key (HAProxy's crt file)
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR [HOST...]}
shift
mkdir -p "$dir"
cd "$dir"
if [ -f ca.pem ] && [ -f server.pem ] && [ -f combined.pem ]; then exit 0; fi
command -v openssl >/dev/null 2>&1 || { echo "make-certs.sh: openssl not found (apt-get install -y openssl)" >&2; exit 1; }
names="DNS:localhost,IP:127.0.0.1,IP:::1"
for host in "$@"; do
  case $host in
    *[!0-9.]*) names="$names,DNS:$host" ;;
    *) names="$names,IP:$host" ;;
  esac
done
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 30 \
  -subj "/CN=Stratus throwaway test CA" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
# openssl ca signs with explicit dates (the expired certificate); its bookkeeping stays in ca-db/.
mkdir -p ca-db
: > ca-db/index.txt
echo 1000 > ca-db/serial
cat > ca-db/ca.cnf <<CNF
[ ca ]
default_ca = throwaway
[ throwaway ]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
certificate = ca.pem
private_key = ca.key
default_md = sha256
policy = anything
copy_extensions = copy
unique_subject = no
[ anything ]
commonName = supplied
CNF
issue() {  # issue NAME COMMON_NAME SUBJECT_ALT_NAMES START END
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "ca-db/$1.csr" \
    -subj "/CN=$2" -addext "subjectAltName=$3" -addext "extendedKeyUsage=serverAuth" 2>/dev/null
  openssl ca -batch -config ca-db/ca.cnf -in "ca-db/$1.csr" -out "$1.pem" -startdate "$4" -enddate "$5" -notext 2>/dev/null
}
now=$(date -u +%Y%m%d%H%M%SZ)
later=$(date -u -d '+30 days' +%Y%m%d%H%M%SZ)
issue server "Stratus test server" "$names" "$now" "$later"
issue server-b "Stratus test server (renewed)" "$names" "$now" "$later"
issue expired "Stratus test server (expired)" "$names" 20200101000000Z 20200201000000Z
issue wrong-host "elsewhere.example" "DNS:elsewhere.example" "$now" "$later"
cat server.pem server.key > combined.pem
chmod 600 ./*.key combined.pem
echo "make-certs.sh: a throwaway CA and certificates for ${names//,/ } in $PWD (trust ca.pem)" >&2
