# Phalanx, the gang-scheduling extender (helm/phalanx runs it beside kube-scheduler).
#   docker build -t phalanx:0.2.0 .
#   docker run phalanx:0.2.0 --kubeconfig /kube/config      # `phalanx serve` is the entrypoint
# Without Docker: scripts/image.sh build (buildah, on a Debian base made by mmdebstrap).
# Dependencies come from requirements-runtime.lock (pinned, complete, wheels only).

# Any base with CPython 3.11 as `python3` and its venv module: the public image (python in
# /usr/local/bin) or Debian bookworm's python3.11 + python3-venv (in /usr/bin).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# /opt/phalanx is what ships; /opt/build only builds the project's wheel.
RUN python3 -m venv /opt/phalanx \
 && python3 -m venv /opt/build
COPY requirements-runtime.lock /tmp/
RUN /opt/phalanx/bin/pip install --no-deps --only-binary=:all: -r /tmp/requirements-runtime.lock
# The project itself: a wheel built with a pinned setuptools (pyproject: setuptools>=69).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# pip and setuptools leave the shipped venv once it is complete: nothing installs at run time.
RUN /opt/build/bin/pip install setuptools==80.9.0 \
 && /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheels . \
 && /opt/phalanx/bin/pip install --no-deps /tmp/wheels/*.whl \
 && /opt/phalanx/bin/pip uninstall --yes --quiet pip setuptools \
 && /opt/phalanx/bin/python -m compileall -q /opt/phalanx/lib

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="phalanx" \
      org.opencontainers.image.description="All-or-nothing GPU gang placement as a kube-scheduler extender" \
      org.opencontainers.image.licenses="Apache-2.0"
# Bytecode was compiled at build time: the root filesystem is read-only in the chart.
ENV PATH=/opt/phalanx/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/phalanx /opt/phalanx
# Non-root (the chart also sets runAsNonRoot / runAsUser 65532).
USER 65532:65532
# 8888: the extender (loopback by default); 9090: --metrics-port in the chart.
EXPOSE 8888 9090
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PHALANX_PORT', '8888') + '/healthz', timeout=3)"]
ENTRYPOINT ["phalanx", "serve"]
CMD ["--in-cluster"]
