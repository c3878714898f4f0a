# taugate: admission webhook server, operator and certificate jobs in one image.
# The Helm chart (charts/taugate) runs it as `taugate serve ...`, `taugate operator ...` and
# `taugate certs ...`; the entrypoint is the `taugate` console script.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TAUGATE_POLICY_DIR=/etc/taugate/policies

# Install the distribution (its dependencies come from pyproject.toml) and boto3 for an s3://
# evidence root (--no-deps: pyproject.toml says why), then drop the sources.
COPY pyproject.toml /tmp/src/
COPY taugate/ /tmp/src/taugate/
COPY webhook/ /tmp/src/webhook/
COPY controllers/ /tmp/src/controllers/
COPY certs/ /tmp/src/certs/
RUN pip install /tmp/src \
 && pip install --no-deps boto3==1.43.11 botocore==1.43.11 s3transfer==0.17.0 jmespath==1.1.0 \
 && rm -rf /tmp/src

# The Rego policy library is data, not a Python package: it lives at TAUGATE_POLICY_DIR (the chart
# can mount a ConfigMap over it).
COPY policies/ /etc/taugate/policies/
# The snapshot the policies' samples are admitted against by the hot-reload gate (policy test).
COPY examples/cluster.yaml /etc/taugate/examples/cluster.yaml

# Non-root, numeric so Kubernetes' runAsNonRoot can verify it (the chart runs as 10001 too).
RUN groupadd --system --gid 10001 taugate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin taugate
USER 10001:10001
WORKDIR /tmp

ENTRYPOINT ["taugate"]
CMD ["--help"]
