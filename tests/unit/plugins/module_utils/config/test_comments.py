# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""with_docs / with_examples: comments that document the generated configs and never change their data."""

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.config import comments as config_comments
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import SUPPORTED_CONTRACTS, contract_name
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle, random_secret

ENDPOINT = "https://cp.example:6443"
VERSIONS = [contract_name(contract) for contract in SUPPORTED_CONTRACTS]
MACHINE_TYPES = list(config_generation.MACHINE_TYPES)
# Keys under these paths are the user's or Kubernetes's own (labels, component configurations): not described.
FREE_FORM = {
    config_comments.V1ALPHA1: ("machine.nodeLabels", "cluster.apiServer.auditPolicy"),
    "KubeNodeConfig": ("labels", "taints"),
    "KubeAdmissionControlConfig": ("configuration",),
    "KubeAuditPolicyConfig": ("configuration",),
    "KubeAuthenticationConfig": ("configuration",),
    "KubeEtcdEncryptionConfig": ("config",),
}
PATCH = {"machine": {"env": {"HTTPS_PROXY": "http://proxy.example:3128"}}}


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14")


@pytest.fixture(scope="module")
def aescbc_bundle():
    bundle = SecretsBundle.generate("v1.14")
    bundle.aescbc_secret = random_secret()
    return bundle


def render(bundle, machine_type, version, **options):
    return config_generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version=version, **options)


def comment_lines(text):
    return [line.strip() for line in text.splitlines() if line.lstrip().startswith("#")]


def key_paths(value, path=()):
    """Every key path of nested mappings, not descending into sequences."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield path + (key,)
            yield from key_paths(child, path + (key,))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("machine_type", MACHINE_TYPES)
@pytest.mark.parametrize("patches", [None, [PATCH]])
def test_comments_never_change_the_data(bundle, version, machine_type, patches):
    plain = render(bundle, machine_type, version, config_patches=patches)
    commented = render(bundle, machine_type, version, config_patches=patches, with_docs=True, with_examples=True)
    assert commented != plain and len(comment_lines(commented)) > 10
    assert list(yaml.safe_load_all(commented)) == list(yaml.safe_load_all(plain))
    assert render(bundle, machine_type, version, config_patches=patches, with_docs=True, with_examples=True) == commented
    assert render(bundle, machine_type, version, config_patches=patches, with_docs=False, with_examples=False) == plain
    # With the comments removed, the text is today's output byte for byte.
    assert "\n".join(line for line in commented.splitlines() if not line.lstrip().startswith("#")) + "\n" == plain


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("machine_type", MACHINE_TYPES)
def test_every_generated_document_and_field_is_described(bundle, aescbc_bundle, version, machine_type):
    for source in (bundle, aescbc_bundle):
        text = render(source, machine_type, version, with_docs=True, additional_sans=["api.example"])
        for document in yaml.safe_load_all(text):
            kind = config_comments.document_kind(document)
            docs = config_comments.FIELD_DOCS[kind]
            assert "# " + docs[""] in text, kind
            free_form = FREE_FORM.get(kind, ())
            for path in key_paths(document):
                dotted = ".".join(path)
                if path in (("apiVersion",), ("kind",)) or any(dotted.startswith(prefix + ".") for prefix in free_form):
                    continue
                assert dotted in docs, (kind, dotted)


def test_every_description_belongs_to_a_generated_field(bundle, aescbc_bundle):
    generated = set()
    for source in (bundle, aescbc_bundle):
        for version in VERSIONS:
            for machine_type in MACHINE_TYPES:
                for document in yaml.safe_load_all(render(source, machine_type, version, additional_sans=["api.example"])):
                    kind = config_comments.document_kind(document)
                    generated.add((kind, ""))
                    generated.update((kind, ".".join(path)) for path in key_paths(document))
    described = set((kind, path) for kind, docs in config_comments.FIELD_DOCS.items() for path in docs)
    assert described - generated == set()


def test_descriptions_and_examples_are_single_static_lines():
    texts = [text for docs in config_comments.FIELD_DOCS.values() for text in docs.values()]
    texts += [title for _kind, _path, _first, _last, title, _snippet in config_comments.EXAMPLES]
    assert texts and all(text and "\n" not in text and text.strip() == text for text in texts)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("machine_type", MACHINE_TYPES)
def test_comments_hold_no_secret(bundle, aescbc_bundle, version, machine_type):
    for source in (bundle, aescbc_bundle):
        comments = "\n".join(comment_lines(render(source, machine_type, version, with_docs=True, with_examples=True)))
        assert not [value for value in source.secret_values() if value in comments]
        assert source.cluster_id not in comments


@pytest.mark.parametrize("version,shown,not_shown", [
    ("v1.9", ["registries:", "kubespan:", "extraKernelArgs:", "cni:", "sysctls:"], ["kind: KubeSpanConfig"]),
    ("v1.12", ["kind: RegistryMirrorConfig", "kubespan:", "grubUseUKICmdline to false", "cni:"], ["registries:"]),
    ("v1.13", ["kind: RegistryMirrorConfig", "kind: KubeSpanConfig", "cni:"], ["kubespan:", "registries:"]),
    ("v1.14", ["kind: RegistryMirrorConfig", "kind: KubeSpanConfig", "kind: SysctlConfig", "kind: KubeExternalManifestConfig"],
     ["kubespan:", "registries:", "extraKernelArgs:", "cni:", "interfaces:"]),
])
def test_examples_follow_the_contract(bundle, version, shown, not_shown):
    text = render(bundle, "controlplane", version, with_examples=True)
    comments = "\n".join(comment_lines(text))
    for snippet in shown:
        assert snippet in comments, snippet
    for snippet in not_shown:
        assert snippet not in comments, snippet
    # Examples only: no field descriptions.
    assert "# " + config_comments.FIELD_DOCS["v1alpha1"][""] not in text


def test_example_snippets_uncomment_to_yaml(bundle):
    text = render(bundle, "controlplane", "v1.11", with_examples=True)
    lines = text.splitlines()
    start = lines.index("    # Example, a pull-through mirror of a registry:") + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("    #     "):
            break
        block.append(line[len("    #     "):])
    assert yaml.safe_load("\n".join(block)) == {"registries": {"mirrors": {"docker.io": {"endpoints": ["https://mirror.example.com"]}}}}


def test_docs_only_has_no_examples(bundle):
    text = render(bundle, "controlplane", "v1.14", with_docs=True)
    assert "# Example," not in text and "# " + config_comments.FIELD_DOCS["KubeFlannelCNIConfig"][""] in text


def test_go_yaml_comments_around_literal_blocks_and_empty_documents():
    document = {"a": {"pem": "line one\nline two\n", "keep": "x\n\n"}, "b": 1}
    comments = go_yaml.Comments(above={(): ["top"], ("a", "pem"): ["the pem"], ("b",): ["", "bee"]},
                                after={("a",): ["end of a"], (): ["end"]})
    text = go_yaml.dump(document, comments)
    assert text == (
        "# top\n"
        "a:\n"
        "    # the pem\n"
        "    pem: |\n"
        "        line one\n"
        "        line two\n"
        "    keep: |+\n"
        "        x\n"
        "\n"
        "    # end of a\n"
        "#\n"
        "# bee\n"
        "b: 1\n"
        "# end\n"
    )
    assert yaml.safe_load(text) == document == yaml.safe_load(go_yaml.dump(document))
    assert go_yaml.dump({}, go_yaml.Comments({(): ["nothing"]}, {})) == "# nothing\n{}\n"
    assert go_yaml.dump(document) == go_yaml.dump(document, None)
