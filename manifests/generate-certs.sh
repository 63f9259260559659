#!/usr/bin/env bash
# Generate the TLS material of the production overlay: a private CA and a serving certificate
# for the custom-metrics-server Service, signed by it.
#
#   manifests/generate-certs.sh [OUTPUT_DIR]
#
# OUTPUT_DIR defaults to manifests/overlays/production/certs (gitignored). It receives:
#   ca.crt   CA certificate: goes into the Secret and, base64, into every APIService's caBundle
#   ca.key   CA private key: stays here, never in the cluster; keep it only to re-issue tls.crt
#   tls.crt  serving certificate (leaf only), SANs = the Service's DNS names, EKU serverAuth
#   tls.key  its private key
#
# An existing ca.crt + ca.key pair in OUTPUT_DIR is reused, so re-running the script rotates the
# serving certificate without changing the caBundle. Delete both to rotate the CA as well.
#
# Environment: SERVICE (custom-metrics-server), NAMESPACE (custom-metrics),
# CLUSTER_DOMAIN (cluster.local), CA_DAYS (3650), SERVING_DAYS (365).
# Needs only openssl (1.1.1 or 3.x); the system openssl.cnf is not used.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out_dir=${1:-"${script_dir}/overlays/production/certs"}
service=${SERVICE:-custom-metrics-server}
namespace=${NAMESPACE:-custom-metrics}
cluster_domain=${CLUSTER_DOMAIN:-cluster.local}
ca_days=${CA_DAYS:-3650}
serving_days=${SERVING_DAYS:-365}

command -v openssl >/dev/null || { echo "generate-certs.sh: openssl not found" >&2; exit 1; }

umask 077
mkdir -p "${out_dir}"
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT

fqdn="${service}.${namespace}.svc"
cat >"${work}/openssl.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no

[dn]

[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[serving]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:${service}, DNS:${service}.${namespace}, DNS:${fqdn}, DNS:${fqdn}.${cluster_domain}
CNF

new_key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

serial() {
    echo "0x$(openssl rand -hex 16)"
}

if [[ -s "${out_dir}/ca.crt" && -s "${out_dir}/ca.key" ]]; then
    echo "reusing the CA in ${out_dir}" >&2
else
    new_key "${work}/ca.key"
    openssl req -new -x509 -sha256 -config "${work}/openssl.cnf" -extensions ca \
        -key "${work}/ca.key" -subj "/CN=${service}-ca" -set_serial "$(serial)" \
        -days "${ca_days}" -out "${work}/ca.crt"
    mv "${work}/ca.key" "${work}/ca.crt" "${out_dir}/"
fi

new_key "${work}/tls.key"
openssl req -new -sha256 -config "${work}/openssl.cnf" \
    -key "${work}/tls.key" -subj "/CN=${fqdn}" -out "${work}/tls.csr"
openssl x509 -req -sha256 -in "${work}/tls.csr" \
    -CA "${out_dir}/ca.crt" -CAkey "${out_dir}/ca.key" -set_serial "$(serial)" \
    -extfile "${work}/openssl.cnf" -extensions serving \
    -days "${serving_days}" -out "${work}/tls.crt" 2>/dev/null

# Refuse to hand out a certificate the aggregator would reject.
openssl verify -CAfile "${out_dir}/ca.crt" -purpose sslserver "${work}/tls.crt" >/dev/null
mv "${work}/tls.key" "${work}/tls.crt" "${out_dir}/"

echo "wrote ${out_dir}/{ca.crt,ca.key,tls.crt,tls.key} for ${fqdn}" >&2
