"""The chart renders for every documented setup: `helm lint` (plain and --strict), `helm template`
of the defaults and of each values example, every object against the Kubernetes schemas, every
flag through the real parsers, and the production settings the issue asks for."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ServerConfig
from custom_metrics_server.prometheus.rules_config import parse_config
from tests.chart.conftest import (
    CHART,
    NAME,
    NAMESPACE,
    Obj,
    example,
    example_names,
    helm,
    one,
    render,
    render_fails,
    select,
    server_container,
    subcommand_parser,
)

# The lint extra installs kubernetes-validate (`make install`); without it these tests skip.
kubernetes_validate = pytest.importorskip("kubernetes_validate")
ValidationError = kubernetes_validate.ValidationError
SchemaNotFoundError = kubernetes_validate.SchemaNotFoundError

#: The Kubernetes version the issue asks to validate against. kubernetes-validate 1.37.0 (the
#: lint extra) ships its schemas; with an older kubernetes-validate the newest version it has is
#: used instead (kubernetes_validate picks the newest schema not newer than the one asked for),
#: and schema_version() says which.
TARGET_KUBERNETES = (1, 37)

#: Flags the chart renders for features other engineers are adding to the server in parallel;
#: they do not parse with today's parser. Remove an entry once `serve --help` lists the flag.
#: None now: --backends-config is in the server, and metrics.k8s.io/v1 (`metricsApi.versions`)
#: renders only an APIService, no flag.
FUTURE_SERVE_FLAGS: set[str] = set()

#: Kinds from CRDs: kubernetes-validate has no schema for them; checked field by field below.
CRD_GROUPS = {"cert-manager.io", "monitoring.coreos.com"}

EXAMPLES = example_names()
#: The defaults plus every example: every render the documentation points at.
SETUPS = ["default", *EXAMPLES]


def setup_objects(setup: str) -> list[Obj]:
    return render() if setup == "default" else render(example(setup))


def schema_version() -> str:
    latest = tuple(int(p) for p in kubernetes_validate.latest_version().split(".")[:2])
    chosen = min(latest, TARGET_KUBERNETES)
    return f"{chosen[0]}.{chosen[1]}"


def test_the_examples_cover_every_documented_setup() -> None:
    wanted = {
        "kubernetes",
        "prometheus-inline-rules",
        "prometheus-existing-configmap",
        "resource-metrics",
        "node-agent",
        "cert-manager",
        "existing-secret",
        "production-ha",
        "metric-reader-rbac",
    }
    assert wanted <= set(EXAMPLES)
    readme = (CHART / "README.md").read_text()
    for name in EXAMPLES:
        assert f"`{name}.yaml`" in readme, f"examples/{name}.yaml is not in the chart README"


# --- helm lint ----------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize("setup", SETUPS)
def test_helm_lint_passes(setup: str, strict: bool) -> None:
    args = ["lint", str(CHART)]
    if setup != "default":
        args += ["--values", str(example(setup))]
    if strict:
        args.append("--strict")
    result = helm(*args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout
    assert "[ERROR]" not in result.stdout


def test_helm_lint_fails_on_a_broken_value() -> None:
    result = helm("lint", str(CHART), "--strict", "--set", "replicas=0", check=False)
    assert result.returncode != 0
    assert "/replicas" in result.stdout + result.stderr


# --- Kubernetes schemas -------------------------------------------------------------------------


def _crd_fields_are_known(obj: Obj) -> None:
    """cert-manager and Prometheus Operator objects: only fields their CRDs define (the subset
    the chart uses), with the required ones present."""
    spec = obj["spec"]
    kind = obj["kind"]
    if kind == "Issuer":
        assert set(spec) <= {"selfSigned", "ca"}
        assert len(spec) == 1
        if "ca" in spec:
            assert set(spec["ca"]) == {"secretName"}
    elif kind == "Certificate":
        assert set(spec) <= {
            "isCA", "commonName", "secretName", "dnsNames", "usages", "duration",
            "renewBefore", "privateKey", "issuerRef",
        }  # fmt: skip
        assert {"secretName", "issuerRef"} <= set(spec)
        assert set(spec["issuerRef"]) <= {"group", "kind", "name"}
        assert spec["issuerRef"]["kind"] in {"Issuer", "ClusterIssuer"}
        assert set(spec["privateKey"]) <= {"algorithm", "size", "rotationPolicy"}
        for field in ("duration", "renewBefore"):
            assert re.fullmatch(r"([0-9]+(ns|us|ms|s|m|h))+", spec[field]), spec[field]
        assert set(spec.get("usages", [])) <= {
            "server auth",
            "digital signature",
            "key encipherment",
        }
    elif kind == "ServiceMonitor":
        assert set(spec) <= {"selector", "namespaceSelector", "endpoints"}
        for endpoint in spec["endpoints"]:
            assert set(endpoint) <= {
                "port", "path", "scheme", "interval", "scrapeTimeout", "bearerTokenFile",
                "authorization", "tlsConfig", "relabelings", "metricRelabelings",
            }  # fmt: skip
            assert set(endpoint["tlsConfig"]) <= {"ca", "serverName", "insecureSkipVerify"}
    else:
        raise AssertionError(f"no check for {kind}")


@pytest.mark.parametrize("setup", SETUPS)
def test_every_rendered_object_matches_the_kubernetes_schemas(setup: str) -> None:
    version = schema_version()
    objects = setup_objects(setup)
    assert objects
    seen: set[tuple[str, str, str]] = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert key not in seen, f"{key} rendered twice"
        seen.add(key)
        group = obj["apiVersion"].rpartition("/")[0]
        if group in CRD_GROUPS:
            _crd_fields_are_known(obj)
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except (ValidationError, SchemaNotFoundError) as error:
            pytest.fail(f"{setup}: {obj['kind']} {obj['metadata']['name']}: {error}")


def test_the_schema_check_does_catch_a_broken_object() -> None:
    deployment = json.loads(json.dumps(one(render(), "Deployment")))
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(deployment, schema_version(), strict=True)
    deployment = json.loads(json.dumps(one(render(), "Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = (
        True
    )
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(deployment, schema_version(), strict=True)


def test_schemas_are_those_of_kubernetes_1_37() -> None:
    # The lint extra pins kubernetes-validate>=1.30; the installed one must have 1.37's schemas
    # for the issue's promise to hold (otherwise schema_version() falls back, and this says so).
    assert schema_version() == "1.37", (
        f"kubernetes-validate {kubernetes_validate.latest_version()} has no 1.37 schemas"
    )


@pytest.mark.parametrize("setup", SETUPS)
def test_namespaced_objects_are_in_the_release_namespace(setup: str) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "APIService"}
    for obj in setup_objects(setup):
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert namespace is None, obj["metadata"]["name"]
        elif obj["kind"] in {"Role", "RoleBinding"} and namespace != NAMESPACE:
            # kube-system's auth reader binding, and the per-metric example in `default`
            assert obj["metadata"]["name"] in {
                f"{NAME}-auth-reader",
                "read-http-requests-per-second",
                "jane-reads-http-requests-per-second",
            }
        else:
            assert namespace == NAMESPACE, (obj["kind"], obj["metadata"]["name"])


@pytest.mark.parametrize("setup", SETUPS)
def test_every_object_carries_the_standard_labels(setup: str) -> None:
    for obj in setup_objects(setup):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == "custom-metrics-server"
        assert labels["helm.sh/chart"] == "custom-metrics-server-0.1.0"
        assert labels["app.kubernetes.io/part-of"] == "custom-metrics-server"
        assert labels["app.kubernetes.io/component"] in {"server", "node-agent"}


# --- flags --------------------------------------------------------------------------------------


def _check_flags(args: list[str], parser_name: str) -> Any:
    """Every flag exact (argparse would accept abbreviations) and parsed by the real parser;
    FUTURE_SERVE_FLAGS are checked for shape and left out of the parse."""
    parser = subcommand_parser(parser_name)
    known = set(parser._option_string_actions)
    kept = []
    for arg in args[1:]:
        flag = arg.split("=", 1)[0]
        assert flag.startswith("--"), f"{arg}: one flag per item, --name=value"
        if parser_name == "serve" and flag in FUTURE_SERVE_FLAGS:
            continue
        assert flag in known, f"{flag} is not a flag of `custom-metrics-server {parser_name}`"
        kept.append(arg)
    try:
        return parser.parse_args(kept)
    except SystemExit:
        pytest.fail(f"custom-metrics-server {parser_name} rejects {kept}")


@pytest.mark.parametrize("setup", SETUPS)
def test_rendered_flags_parse_with_the_real_parsers(setup: str) -> None:
    objects = setup_objects(setup)
    main = server_container(objects)
    assert "command" not in main, "the image's ENTRYPOINT is the console script"
    assert main["args"][0] == "serve"
    parsed = _check_flags(main["args"], "serve")
    assert parsed.demo is False
    assert parsed.demo_file is None
    assert parsed.secure_port == main["ports"][0]["containerPort"]
    for daemon_set in select(objects, "DaemonSet"):
        (agent,) = daemon_set["spec"]["template"]["spec"]["containers"]
        assert agent["args"][0] == "node-agent"
        agent_args = _check_flags(agent["args"], "node-agent")
        assert agent_args.secure_port == agent["ports"][0]["containerPort"]


def test_the_future_flag_skip_is_needed_and_narrow() -> None:
    # A future flag that lands in the parser fails this: drop it from FUTURE_SERVE_FLAGS.
    assert not FUTURE_SERVE_FLAGS & set(subcommand_parser("serve")._option_string_actions)


def test_the_backends_config_example_renders_a_file_the_server_accepts() -> None:
    objects = render(example("backends-config"))
    parsed = _check_flags(server_container(objects)["args"], "serve")
    assert str(parsed.backends_config) == "/etc/custom-metrics-server/backends/backends.yaml"
    (config_map,) = [
        o for o in select(objects, "ConfigMap") if o["metadata"]["name"].endswith("-backends")
    ]
    config = parse_backends_file(config_map["data"]["backends.yaml"], source="the chart")
    assert [(entry.name, entry.type) for entry in config.backends] == [
        ("kubernetes", "kubernetes"),
        ("prometheus", "prometheus"),
    ]
    # The defaults render no backends file.
    assert not [a for a in server_container(render())["args"] if "backends-config" in a]


def test_extra_args_and_env_are_appended() -> None:
    objects = render(
        sets=(
            "extraArgs[0]=--max-requests-inflight=800",
            "extraEnv[0].name=PYTHONFAULTHANDLER",
            "extraEnv[0].value=enabled",
        )
    )
    main = server_container(objects)
    assert main["args"][-1] == "--max-requests-inflight=800"
    assert _check_flags(main["args"], "serve").max_requests_inflight == 800
    assert {"name": "PYTHONFAULTHANDLER", "value": "enabled"} in main["env"]
    assert main["env"][0]["name"] == "POD_NAMESPACE"


def test_an_extra_arg_must_be_a_flag() -> None:
    stderr = render_fails(sets=("extraArgs[0]=serve",))
    assert "/extraArgs/0" in stderr


def test_kubelet_direct_example_mounts_the_ca_it_names() -> None:
    objects = render(example("kubelet-direct"))
    main = server_container(objects)
    parsed = _check_flags(main["args"], "serve")
    assert parsed.kubelet_source == "direct"
    assert parsed.kubelet_port == 10250
    ca = PurePosixPath(str(parsed.kubelet_certificate_authority))
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    assert mounts["kubelet-ca"] == str(ca.parent)
    assert not parsed.kubelet_insecure_tls


# --- production settings ------------------------------------------------------------------------


def test_defaults_are_hardened_and_probed() -> None:
    objects = render()
    deployment = one(objects, "Deployment", NAME)
    pod = deployment["spec"]["template"]["spec"]
    main = server_container(objects)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    security = main["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(host)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    for probe, path in (
        ("startupProbe", "/livez"),
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
    ):
        get = main[probe]["httpGet"]
        assert (get["path"], get["scheme"], ports[get["port"]]) == (path, "HTTPS", 6443)
    assert main["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert main["resources"]["limits"] == {"cpu": "1", "memory": "512Mi"}
    budget = one(objects, "PodDisruptionBudget", NAME)
    assert budget["spec"]["minAvailable"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert (
        spread["kubernetes.io/hostname"]["labelSelector"]["matchLabels"].items() <= labels.items()
    )
    assert "priorityClassName" not in pod
    assert not select(objects, "ServiceMonitor")


def test_production_example_sets_ha_priority_and_a_service_monitor() -> None:
    objects = render(example("production-ha"))
    deployment = one(objects, "Deployment", NAME)
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 3
    assert pod["priorityClassName"] == "system-cluster-critical"
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    monitor = one(objects, "ServiceMonitor", NAME)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = one(objects, "Service", NAME)
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    paths = [e["path"] for e in monitor["spec"]["endpoints"]]
    assert paths == ["/metrics", "/metrics/resources"]
    secret_name = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["secret"][
        "secretName"
    ]
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] == service["spec"]["ports"][0]["name"]
        assert endpoint["scheme"] == "https"
        # Verified as kube-aggregator verifies it: the serving Secret's CA, the Service's name.
        assert endpoint["tlsConfig"] == {
            "ca": {"secret": {"name": secret_name, "key": "ca.crt"}},
            "serverName": f"{NAME}.{NAMESPACE}.svc",
        }
        assert "insecureSkipVerify" not in endpoint["tlsConfig"]
        assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    secret = one(objects, "Secret", secret_name)
    assert "ca.crt" in secret["data"]
    assert f"{NAME}.{NAMESPACE}.svc" in secret["metadata"]["annotations"][
        "custom-metrics-server/dns-names"
    ].split(",")
    assert server_container(objects)["image"] == (
        "registry.example.com/platform/custom-metrics-server:0.1.0"
    )


def test_hard_anti_affinity_and_custom_spread_constraints() -> None:
    objects = render(
        sets=(
            "podAntiAffinity=hard",
            "topologySpreadConstraints[0].maxSkew=2",
            "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        )
    )
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    (constraint,) = pod["topologySpreadConstraints"]
    assert constraint["maxSkew"] == 2
    assert constraint["labelSelector"]["matchLabels"]  # filled in with the selector labels
    none = one(render(set_json=("topologySpreadConstraints=[]",)), "Deployment")
    assert "topologySpreadConstraints" not in none["spec"]["template"]["spec"]


def test_a_budget_that_would_block_every_drain_is_refused() -> None:
    stderr = render_fails(sets=("replicas=1",))
    assert "podDisruptionBudget.minAvailable=1 with replicas=1" in stderr
    single = render(sets=("replicas=1", "podDisruptionBudget.enabled=false"))
    assert not select(single, "PodDisruptionBudget")
    by_max = render(sets=("replicas=1", "podDisruptionBudget.maxUnavailable=1"))
    assert one(by_max, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": one(by_max, "PodDisruptionBudget")["spec"]["selector"],
    }


def test_image_tag_defaults_to_the_app_version_and_a_digest_wins() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    # The name `make image` gives the image it builds (podman's and buildah's for a local one).
    assert server_container(render())["image"] == (
        f"localhost/custom-metrics-server:{chart['appVersion']}"
    )
    digest = "sha256:" + "a" * 64
    objects = render(
        example("node-agent"), sets=("image.repository=r.example/cms", f"image.digest={digest}")
    )
    assert server_container(objects)["image"] == f"r.example/cms@{digest}"
    agent = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert agent["image"] == f"r.example/cms@{digest}"  # the same image runs the agent
    tagged = render(example("node-agent"), sets=("nodeAgent.image.repository=r.example/agent",))
    agent = one(tagged, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert agent["image"] == f"r.example/agent:{chart['appVersion']}"


def test_names_follow_the_release() -> None:
    other = render(release="metrics", namespace="observability")
    assert one(other, "Deployment")["metadata"]["name"] == "metrics-custom-metrics-server"
    fixed = {"system:aggregated-metrics-reader"}
    for obj in other:
        name = obj["metadata"]["name"]
        if obj["kind"] == "APIService":
            assert name == f"{obj['spec']['version']}.{obj['spec']['group']}"
            assert obj["spec"]["service"] == {
                "name": "metrics-custom-metrics-server",
                "namespace": "observability",
                "port": 443,
            }
        elif name not in fixed:
            assert name.startswith("metrics-custom-metrics-server"), name
    auth_reader = one(other, "RoleBinding", "metrics-custom-metrics-server-auth-reader")
    assert auth_reader["metadata"]["namespace"] == "kube-system"
    assert auth_reader["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "metrics-custom-metrics-server",
            "namespace": "observability",
        }
    ]
    overridden = render(sets=("fullnameOverride=cms",), release="anything")
    assert one(overridden, "Service")["metadata"]["name"] == "cms"


def test_leader_election_lease_is_the_one_the_role_grants() -> None:
    for objects in (render(), render(sets=("leaderElection.leaseName=my-lease",))):
        parsed = _check_flags(server_container(objects)["args"], "serve")
        role = one(objects, "Role", f"{NAME}-leader-election")
        named = [r for r in role["rules"] if r.get("resourceNames")]
        assert named == [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [parsed.leader_elect_resource_name],
                "verbs": ["get", "update"],
            }
        ]
        assert parsed.leader_elect is True
    off = render(sets=("leaderElection.enabled=false",))
    assert not _check_flags(server_container(off)["args"], "serve").leader_elect
    assert not select(off, "Role")


# --- optional features --------------------------------------------------------------------------


def _prometheus_config(objects: list[Obj]) -> Any:
    main = server_container(objects)
    parsed = _check_flags(main["args"], "serve")
    path = PurePosixPath(str(parsed.config))
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["prometheus-rules"]["mountPath"] == str(path.parent)
    assert mounts["prometheus-rules"]["readOnly"] is True
    volumes = {
        v["name"]: v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    return parsed, path, volumes["prometheus-rules"]["configMap"]["name"]


def test_prometheus_inline_rules_load_with_the_real_parser() -> None:
    objects = render(example("prometheus-inline-rules"))
    parsed, path, config_map_name = _prometheus_config(objects)
    config_map = one(objects, "ConfigMap", config_map_name)
    text = config_map["data"][path.name]
    wanted = yaml.safe_load(example("prometheus-inline-rules").read_text())["prometheus"]["config"]
    assert yaml.safe_load(text) == wanted
    config = parse_config(
        text, default_server=ServerConfig(name=DEFAULT_SERVER, url=parsed.prometheus_url)
    )
    assert config.warnings == ()
    assert (len(config.rules), len(config.external_rules)) == (1, 1)


def test_prometheus_existing_config_map_is_mounted_not_rendered() -> None:
    objects = render(example("prometheus-existing-configmap"))
    parsed, path, config_map_name = _prometheus_config(objects)
    assert config_map_name == "adapter-config"
    assert path.name == "config.yaml"
    assert not select(objects, "ConfigMap")
    assert parsed.prometheus_url == "http://thanos-query.monitoring.svc:9090/"
    assert parsed.prometheus_header == [("X-Scope-OrgID", "team-a")]
    assert parsed.prometheus_query_timeout == 5.0


def test_metrics_api_from_prometheus_needs_the_prometheus_backend() -> None:
    stderr = render_fails(sets=("metricsApi.enabled=true", "metricsApi.source=prometheus"))
    assert "set prometheus.enabled=true" in stderr
    objects = render(
        sets=("metricsApi.enabled=true", "metricsApi.source=prometheus", "prometheus.enabled=true")
    )
    parsed = _check_flags(server_container(objects)["args"], "serve")
    assert (parsed.enable_metrics_api, parsed.resource_metrics_source) == (True, "prometheus")


def test_metrics_api_registers_v1_preferred_beside_v1beta1() -> None:
    for objects in (render(example("resource-metrics")), render(sets=("metricsApi.enabled=true",))):
        services = {o["metadata"]["name"]: o["spec"] for o in select(objects, "APIService")}
        v1, v1beta1 = services["v1.metrics.k8s.io"], services["v1beta1.metrics.k8s.io"]
        assert (v1["group"], v1["version"], v1["groupPriorityMinimum"]) == (
            "metrics.k8s.io",
            "v1",
            100,
        )
        assert (v1["versionPriority"], v1beta1["versionPriority"]) == (200, 100)
        assert v1["service"] == v1beta1["service"]
        assert (
            v1["caBundle"]
            == v1beta1["caBundle"]
            == services["v1beta2.custom.metrics.k8s.io"]["caBundle"]
        )
        assert "--enable-metrics-api" in server_container(objects)["args"]
    # metrics.k8s.io stays off by default: no APIService of the group at all.
    assert not [o for o in select(render(), "APIService") if o["spec"]["group"] == "metrics.k8s.io"]


def test_metrics_api_can_register_v1beta1_only_as_metrics_server() -> None:
    objects = render(example("metrics-api-v1beta1-only"))
    names = {o["metadata"]["name"] for o in select(objects, "APIService")}
    assert "v1beta1.metrics.k8s.io" in names
    assert "v1.metrics.k8s.io" not in names
    assert "--enable-metrics-api" in server_container(objects)["args"]


def test_backends_config_is_mounted_and_rolls_the_deployment() -> None:
    objects = render(example("backends-config"))
    config_map = one(objects, "ConfigMap", f"{NAME}-backends")
    wanted = yaml.safe_load(example("backends-config").read_text())["backends"]["config"]
    assert yaml.safe_load(config_map["data"]["backends.yaml"]) == wanted
    main = server_container(objects)
    flag = next(a for a in main["args"] if a.startswith("--backends-config="))
    path = PurePosixPath(flag.split("=", 1)[1])
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["backends-config"]["mountPath"] == str(path.parent)
    assert mounts["backends-config"]["readOnly"] is True
    template = one(objects, "Deployment")["spec"]["template"]
    checksum = template["metadata"]["annotations"]["checksum/backends-config"]
    changed = render(example("backends-config"), set_json=("backends.config.routes=[]",))
    assert (
        one(changed, "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/backends-config"
        ]
        != checksum
    )
    assert main["image"].startswith(
        "registry.example.com/platform/custom-metrics-server-with-plugins:"
    )


def test_node_agent_cross_checks() -> None:
    stderr = render_fails(example("node-agent"), sets=("nodeAgent.insecureTLS=false",))
    assert "nodeAgent.certificateAuthority" in stderr
    objects = render(
        example("node-agent"),
        sets=("nodeAgent.insecureTLS=false", "nodeAgent.certificateAuthority=/etc/agents/ca.crt"),
    )
    parsed = _check_flags(server_container(objects)["args"], "serve")
    assert parsed.node_agent_insecure_tls is False
    assert str(parsed.node_agent_certificate_authority) == "/etc/agents/ca.crt"
    crio = render(
        example("node-agent"), sets=("nodeAgent.criEndpoint=unix:///var/run/crio/crio.sock",)
    )
    pod = one(crio, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cri-socket"]["hostPath"]["path"] == "/var/run/crio/crio.sock"
    (agent,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert mounts["cri-socket"] == "/var/run/crio/crio.sock"


def test_node_agent_and_server_selectors_never_overlap() -> None:
    objects = render(example("node-agent"))
    server = one(objects, "Deployment")
    agent = one(objects, "DaemonSet")
    server_labels = server["spec"]["template"]["metadata"]["labels"]
    agent_labels = agent["spec"]["template"]["metadata"]["labels"]
    assert not server["spec"]["selector"]["matchLabels"].items() <= agent_labels.items()
    assert not agent["spec"]["selector"]["matchLabels"].items() <= server_labels.items()
    service = one(objects, "Service")
    assert not service["spec"]["selector"].items() <= agent_labels.items()
    # The server's --node-agent-selector finds the agent pods, and only them.
    parsed = _check_flags(server_container(objects)["args"], "serve")
    wanted = dict(pair.split("=", 1) for pair in parsed.node_agent_selector.split(","))
    assert wanted.items() <= agent_labels.items()
    assert not wanted.items() <= server_labels.items()
    assert (
        parsed.node_agent_port
        == agent["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    )


def test_notes_name_the_tls_mode_and_the_namespace_label_the_agent_needs() -> None:
    result = helm(
        "install", "custom-metrics-server", str(CHART), "--namespace", NAMESPACE,
        "--dry-run=client", "--values", str(example("node-agent")),
    )  # fmt: skip
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "TLS: generate." in notes
    assert "kubectl get apiservices" in notes
    assert (
        f"kubectl label namespace {NAMESPACE} pod-security.kubernetes.io/enforce=privileged"
        in notes
    )


def test_service_monitor_can_authenticate_with_a_secret_instead_of_a_file() -> None:
    objects = render(
        example("production-ha"),
        sets=(
            "serviceMonitor.authorization.type=Bearer",
            "serviceMonitor.authorization.credentials.name=prometheus-token",
            "serviceMonitor.authorization.credentials.key=token",
        ),
    )
    for endpoint in one(objects, "ServiceMonitor")["spec"]["endpoints"]:
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": "prometheus-token", "key": "token"},
        }
        assert "bearerTokenFile" not in endpoint


def test_common_labels_and_grace_period() -> None:
    objects = render(sets=("commonLabels.team=platform", "terminationGracePeriodSeconds=60"))
    assert all(o["metadata"]["labels"]["team"] == "platform" for o in objects)
    assert (
        one(objects, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        == 60
    )
    assert (
        "terminationGracePeriodSeconds"
        not in one(render(), "Deployment")["spec"]["template"]["spec"]
    )


def test_kubernetes_older_than_1_30_is_refused() -> None:
    # preStop sleep, matchLabelKeys and nodeTaintsPolicy need 1.30 (Chart.yaml kubeVersion).
    result = helm("template", "x", str(CHART), "--kube-version", "1.29.9", check=False)
    assert result.returncode != 0
    assert "kubeVersion" in result.stderr or ">=1.30.0-0" in result.stderr
    helm("template", "x", str(CHART), "--kube-version", "1.30.0")


def test_host_aliases_and_dns_settings_reach_the_server_pod() -> None:
    """Out of reach of cluster DNS (a Prometheus or an API server by name only): the server
    pod takes hostAliases, dnsPolicy and dnsConfig as a PodSpec does."""
    aliases = [{"ip": "10.244.0.1", "hostnames": ["prometheus.example", "api.example"]}]
    dns = {"nameservers": ["10.244.0.53"], "options": [{"name": "ndots", "value": "2"}]}
    objects = render(
        set_json=(f"hostAliases={json.dumps(aliases)}", f"dnsConfig={json.dumps(dns)}"),
        sets=("dnsPolicy=None",),
    )
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert spec["hostAliases"] == aliases
    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"] == dns
    plain = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert not {"hostAliases", "dnsPolicy", "dnsConfig"} & plain.keys()
    stderr = render_fails(set_json=('hostAliases=[{"ip": "10.0.0.1"}]',))
    assert "hostnames" in stderr
    stderr = render_fails(sets=("dnsPolicy=Cluster",))
    assert "dnsPolicy" in stderr


def test_the_node_agent_reads_the_host_s_proc_read_only() -> None:
    spec = one(render(example("node-agent")), "DaemonSet")["spec"]["template"]["spec"]
    agent = spec["containers"][0]
    assert "--host-proc=/host/proc" in agent["args"]
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts["host-proc"]["mountPath"] == "/host/proc"
    assert mounts["host-proc"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["host-proc"]["hostPath"] == {"path": "/proc", "type": "Directory"}
