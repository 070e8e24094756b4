# Peon as the tool daemon of one sandbox: `peon serve` on port 8765, the workspace and the session's
# state (grants, audit log) as volumes, running as an unprivileged user. See docs/deploy.md.
#
#   docker build -t peon:0.1.0 .
#   docker run --rm -p 127.0.0.1:8765:8765 -e PEON_SERVE_TOKEN="$(openssl rand -hex 32)" \
#       -v "$PWD:/workspace" peon:0.1.0
#
# Podman and Buildah: build with `--format docker`. HEALTHCHECK exists only in the Docker image format; the
# default OCI format drops it (podman run --health-cmd gives it back; docs/deploy.md).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    XDG_STATE_HOME=/state

# git: most coding agents expect it in the workspace (bash and coreutils come with the base image).
# libseccomp2: the OS sandbox's seccomp filter (UDP, raw sockets, setuid bits, io_uring).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates libseccomp2 \
    && rm -rf /var/lib/apt/lists/*

# The OS sandbox is on (sandbox.mode = "auto", the default): as an unprivileged user that is Landlock and
# seccomp (the mount view and private network namespace need CAP_SYS_ADMIN; `peon doctor` says what is
# enforced). Commands read only the system, the workspace and the temp directory: /state (audit log,
# grants) stays out of their reach.
RUN groupadd --gid 10001 peon \
    && useradd --uid 10001 --gid 10001 --home-dir /home/peon --create-home --shell /bin/bash peon \
    && mkdir -p /workspace /state /home/peon/.config/peon \
    && printf '%s\n' '[sandbox]' \
       'readable = ["/usr", "/etc", "/lib", "/lib64", "/bin", "/sbin", "/opt", "/proc", "/sys", "/dev", "/run", "/home/peon", "/workspace"]' \
       > /home/peon/.config/peon/config.toml \
    && chown -R 10001:10001 /workspace /state /home/peon

WORKDIR /opt/peon
COPY pyproject.toml README.md ./
COPY config ./config
COPY peon ./peon
COPY supervisor ./supervisor
COPY workers ./workers
# This checkout, with the dependency ranges pyproject.toml pins.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[serve]"

USER 10001:10001
WORKDIR /workspace
VOLUME ["/workspace", "/state"]
EXPOSE 8765

# /healthz needs no token; the interpreter is the only HTTP client in a slim image. Kept only in the Docker
# image format (podman/buildah: --format docker).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=2).status != 200)"]

# Listening beyond loopback needs a token: set PEON_SERVE_TOKEN, or mount a file and add --token-file.
# SIGTERM drains: running calls get --drain-seconds, then are cancelled; the process exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["peon", "serve"]
CMD ["--workspace", "/workspace", "--state-dir", "/state", "--host", "0.0.0.0", "--port", "8765", "--log-format", "json"]
