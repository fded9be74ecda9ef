"""Constrained field types of the API: one definition per kind of value, used by the pydantic
models and, through the generated CRD, by the API server — so that ``qdd render`` and
``kubectl apply`` refuse exactly the same values.

Patterns are RE2/Rust-regex compatible (no look-around): the API server checks them with Go's
regexp, pydantic with Rust's ``regex`` crate; both run in linear time. Name rules are
Kubernetes' own (k8s.io/apimachinery/pkg/util/validation: DNS-1123 subdomain and label,
qualified names, label values); quantities are a strict subset of resource.Quantity.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
QUANTITY = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]+)?$"
IMAGE = r"^[A-Za-z0-9\[][A-Za-z0-9._/:@+\[\]-]*$"
"""An OCI image reference: [registry[:port]/]path[:tag][@digest] — characters only; the runtime
parses the rest."""
MODEL_PATH = r"^/?[A-Za-z0-9_.][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*$"
"""An HF repository id (org/name) or an absolute or relative path; no spaces, no empty parts, and
not starting with '-': the name is the first argument of ``vllm serve`` and the benchmark's
``--tokenizer`` value, where ``--headless`` would be read as a flag (issue 21)."""
_SEGMENT = r"([^/.\x00-\x1f][^/\x00-\x1f]*|\.[^/.\x00-\x1f][^/\x00-\x1f]*|\.\.[^/\x00-\x1f]+|\.)"
SUB_PATH = rf"^{_SEGMENT}(/({_SEGMENT})?)*$"
"""A relative path inside a volume, as Kubernetes checks volumeMounts[].subPath: not absolute, no
'..' element (any other name, '.hidden', 'a..b', a trailing '/', is fine); no control characters."""
SERVED_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]*$"
VERSION = r"^v?[0-9]+\.[0-9]+\.[0-9]+([.+-][A-Za-z0-9.]+)?$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
REVISION = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
"""A git revision of the model repository: a commit hash, a tag or a branch name."""
ARCH_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
HOST = r"^[A-Za-z0-9:]([A-Za-z0-9.:-]*[A-Za-z0-9:])?$|^\[[0-9A-Fa-f:.]+\]$"
"""A host name or an IPv4/IPv6 address (bracketed or bare)."""
HTTP_URL = r"^https?://[A-Za-z0-9\[][A-Za-z0-9.:\[\]_-]*(/[A-Za-z0-9._~/%-]*)?$"
"""An http(s) base URL: a host (name, IPv4 or [IPv6]) with an optional port and path; no query, no user."""
UCX_TLS = r"^\^?[a-z0-9_]+(,[a-z0-9_]+)*$"
"""UCX_TLS: a comma-separated transport list, optionally negated with a leading '^'."""
ALL2ALL = r"^[a-z0-9_]+$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
FIELD_PATH = (r"^(metadata\.(name|namespace|uid|labels\['[A-Za-z0-9./_-]+'\]|annotations\['[A-Za-z0-9./_-]+'\])"
              r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$")
"""The downward-API fields an env var may read (core/v1 ObjectFieldSelector)."""
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
"""A Secret or PersistentVolumeClaim name."""
LabelKey = Annotated[str, Field(min_length=1, max_length=317, pattern=QUALIFIED_NAME)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
Quantity = Annotated[str, Field(min_length=1, max_length=32, pattern=QUANTITY)]
Image = Annotated[str, Field(min_length=1, max_length=512, pattern=IMAGE)]
NO_NUL = r"^[^\x00]*$"
"""No NUL character: an argument or environment value is a C string of execve(2), which a NUL would
cut short (or the runtime refuses the container after the pod was accepted)."""
ExtraArg = Annotated[str, Field(max_length=8192, pattern=NO_NUL)]
EnvValue = Annotated[str, Field(max_length=32768, pattern=NO_NUL)]

MAX_CONCURRENCY = 1 << 20
"""1,048,576 concurrent requests: 16 decode endpoints × 72 ranks × 1,024 sequences rounded up.
Planning cost does not depend on it (no list of that size is built)."""
MAX_TOKENS = 1 << 20
"""Tokens of one ISL/OSL/batch: 1,048,576, above any Qwen context (262,144 in config.json)."""

WEIGHT_DIGEST = r"^sha256:[0-9a-f]{64}$"
"""``sha256:`` and 64 lower-case hex digits (qdd.weightcache.program.manifest_digest)."""

PATTERN_HELP: dict[str, str] = {
    WEIGHT_DIGEST: "'sha256:' and 64 lower-case hex digits, as `qdd weights digest DIR` prints it (the coreutils "
                   "pipeline of docs/cold-start.md prints the hex digits alone: put 'sha256:' before them)",
    HTTP_URL: "an http:// or https:// URL: a host (name, IPv4 or [IPv6]) with an optional port and path; no user "
              "info, query or fragment, e.g. http://prometheus-operated.monitoring.svc:9090",
    DNS1123_LABEL: "a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit",
    DNS1123_SUBDOMAIN: "a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending "
                       "with a letter or digit",
    DNS1035_LABEL: "a DNS label: lowercase letters, digits and '-', starting with a letter",
    QUALIFIED_NAME: "a label key: an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_', '.'",
    LABEL_VALUE: "a label value: at most 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit",
    QUANTITY: "a Kubernetes quantity such as 32, 500m, 256Gi or 1e9",
    IMAGE: "an image reference [registry[:port]/]path[:tag][@digest], e.g. registry.example:5000/qdd-vllm:0.33.0 "
           "(letters, digits and . _ - / : @ + [ ])",
    MODEL_PATH: "an HF model id (org/name) or a path: letters, digits, '_', '.', '-' and '/', not starting with '-' "
                "(it would be read as a flag)",
    NO_NUL: "text without a NUL character (\\x00 cannot be passed to a process)",
    SUB_PATH: "a relative path inside the volume: not starting with '/', no '..' element, no control characters",
    SERVED_NAME: "letters, digits and '_', '.', ':', '/', '+', '-'",
    VERSION: "a vLLM version such as 0.33.0",
    IDENTIFIER: "a Python class name (config.json architectures[0])",
    REVISION: "a commit hash, tag or branch of the model repository",
    ARCH_NAME: "letters, digits, '_', '.', '-'",
    HOST: "a host name or an IP address",
    UCX_TLS: "a comma-separated UCX transport list such as cuda_copy,cuda_ipc,tcp (optionally starting with '^')",
    ALL2ALL: "a vLLM --all2all-backend name (lowercase letters, digits, '_')",
    SECRET_KEY: "a Secret/ConfigMap key: letters, digits, '-', '_', '.'",
    FIELD_PATH: "a downward-API field such as status.podIP, metadata.name or metadata.labels['key']",
    ENV_NAME: "an environment variable name: letters, digits and '_', not starting with a digit",
}
"""What each pattern means, for error messages that say what to write."""
