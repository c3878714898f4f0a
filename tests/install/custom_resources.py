"""Minimal JSON Schemas for the custom resources the chart renders but Kubernetes does not define
(``kubernetes-validate`` has no schema for them): cert-manager's Issuer and Certificate
(cert-manager.io/v1) and prometheus-operator's ServiceMonitor and PrometheusRule
(monitoring.coreos.com/v1). Each holds the fields their CRDs require and the types and enums of the
fields the chart sets; unknown fields are rejected where the chart sets them, so a typo fails.
Source: the cert-manager v1 and prometheus-operator v1 API references.
"""

from __future__ import annotations

import jsonschema

_META = {"type": "object", "required": ["name", "namespace"],
         "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string", "minLength": 1}}}
_DURATION = {"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
_ISSUER_REF = {"type": "object", "required": ["name"], "additionalProperties": False,
               "properties": {"name": {"type": "string", "minLength": 1}, "kind": {"enum": ["Issuer", "ClusterIssuer"]},
                              "group": {"const": "cert-manager.io"}}}
_USAGES = ["signing", "digital signature", "content commitment", "key encipherment", "key agreement",
           "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
           "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel",
           "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"]


def _kind(api_version: str, kind: str, spec: dict) -> dict:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": _META,
                           "spec": spec}}


SCHEMAS: dict[tuple[str, str], dict] = {
    ("cert-manager.io/v1", "Issuer"): _kind("cert-manager.io/v1", "Issuer", {
        "type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
        "properties": {"selfSigned": {"type": "object"},
                       "ca": {"type": "object", "required": ["secretName"],
                              "properties": {"secretName": {"type": "string", "minLength": 1}}}}}),
    ("cert-manager.io/v1", "Certificate"): _kind("cert-manager.io/v1", "Certificate", {
        "type": "object", "required": ["secretName", "issuerRef"], "additionalProperties": False,
        "anyOf": [{"required": ["dnsNames"]}, {"required": ["commonName"]}],
        "properties": {
            "secretName": {"type": "string", "minLength": 1}, "issuerRef": _ISSUER_REF, "isCA": {"type": "boolean"},
            "commonName": {"type": "string", "maxLength": 64}, "duration": _DURATION, "renewBefore": _DURATION,
            "dnsNames": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            "usages": {"type": "array", "items": {"enum": _USAGES}},
            "privateKey": {"type": "object", "additionalProperties": False, "properties": {
                "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "size": {"type": "integer"},
                "rotationPolicy": {"enum": ["Never", "Always"]}, "encoding": {"enum": ["PKCS1", "PKCS8"]}}}}}),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _kind("monitoring.coreos.com/v1", "ServiceMonitor", {
        "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
        "properties": {
            "selector": {"type": "object"}, "namespaceSelector": {"type": "object"},
            "endpoints": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["port"], "additionalProperties": False,
                "properties": {"port": {"type": "string"}, "scheme": {"enum": ["http", "https"]},
                               "path": {"type": "string"},
                               "interval": {"type": "string",
                                            "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
                                                       "(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                               "tlsConfig": {"type": "object"}}}}}}),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _kind("monitoring.coreos.com/v1", "PrometheusRule", {
        "type": "object", "required": ["groups"], "additionalProperties": False,
        "properties": {"groups": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "rules"],
            "properties": {"name": {"type": "string", "minLength": 1}, "rules": {"type": "array", "items": {
                "type": "object", "required": ["expr"], "additionalProperties": False,
                "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                "properties": {"alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                               "record": {"type": "string"},
                               "expr": {"type": "string", "minLength": 1}, "for": {"type": "string"},
                               "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                               "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}}}),
}


def validate(obj: dict) -> None:
    """Validate a custom resource against its minimal schema. Raises ``KeyError`` for a kind
    without one and ``jsonschema.ValidationError`` for an invalid object."""
    schema = SCHEMAS[(obj.get("apiVersion"), obj.get("kind"))]
    jsonschema.validate(obj, schema)
