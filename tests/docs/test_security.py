"""docs/security.md's recipes hold: its Kubernetes manifests parse, and the NetworkPolicy admits
ingress to the job's pods from the job's own pods only (evaluated here with Kubernetes' rules);
every recipe of its table names a test that exists, or says why none can run here; the docs
that start jobs link to it; the names it gives exist in the code; and the MPI engine uses no
mpi4py method that unpickles what a peer sends. Reads files only: no TensorFlow, no package
import."""

import ast
import ipaddress
import os
import re

import pytest
import yaml
from helpers.paths import REPO_DIR

REPO = REPO_DIR
SECURITY = os.path.join(REPO, 'docs', 'security.md')
JOB_LABEL = 'tensorpack-lite/job'


def read(*parts):
    with open(os.path.join(REPO, *parts), encoding='utf-8') as f:
        return f.read()


def yaml_documents():
    """Every document of every ```yaml block of docs/security.md."""
    blocks = re.findall(r'^```yaml\n(.*?)^```', read('docs', 'security.md'), re.M | re.S)
    assert blocks, "docs/security.md has no ```yaml block"
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc is not None]


def network_policy():
    policies = [d for d in yaml_documents() if isinstance(d, dict) and d.get('kind') == 'NetworkPolicy']
    assert len(policies) == 1, "expected one NetworkPolicy in docs/security.md, found {}".format(
        len(policies))
    return policies[0]


# ----- Kubernetes' ingress rules, in pure Python -------------------------------------------------

def selector_matches(selector, labels):
    """Whether a LabelSelector (matchLabels, matchExpressions) selects ``labels``; an empty
    selector selects everything."""
    selector = selector or {}
    for key, value in (selector.get('matchLabels') or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get('matchExpressions') or []:
        key, operator, values = expr['key'], expr['operator'], expr.get('values') or []
        present = key in labels
        if operator == 'In' and not (present and labels[key] in values):
            return False
        if operator == 'NotIn' and present and labels[key] in values:
            return False
        if operator == 'Exists' and not present:
            return False
        if operator == 'DoesNotExist' and present:
            return False
        if operator not in ('In', 'NotIn', 'Exists', 'DoesNotExist'):
            raise ValueError("unknown selector operator {!r}".format(operator))
    return True


def namespace_labels(pod):
    """A namespace's labels, with the one Kubernetes sets on every namespace."""
    return dict(pod.get('namespace_labels') or {}, **{'kubernetes.io/metadata.name': pod['namespace']})


def peer_admits(peer, policy_namespace, source):
    """Whether one ``from`` entry (NetworkPolicyPeer) admits the source: a pod, or a machine
    outside the cluster (``namespace`` None), which only an ``ipBlock`` can admit."""
    if 'ipBlock' in peer:
        block = peer['ipBlock']
        if source.get('ip') is None:
            return False
        ip = ipaddress.ip_address(source['ip'])
        return (ip in ipaddress.ip_network(block['cidr'])
                and not any(ip in ipaddress.ip_network(cidr) for cidr in block.get('except') or []))
    if source['namespace'] is None:
        return False
    if 'namespaceSelector' in peer:
        if not selector_matches(peer['namespaceSelector'], namespace_labels(source)):
            return False
    elif source['namespace'] != policy_namespace:
        return False            # a podSelector alone selects pods of the policy's own namespace
    return selector_matches(peer.get('podSelector'), source.get('labels') or {})


def port_admitted(rule, port, protocol='TCP'):
    ports = rule.get('ports')
    if not ports:
        return True             # no ports: every port
    for entry in ports:
        if entry.get('protocol', 'TCP') != protocol:
            continue
        if 'port' not in entry:
            return True
        first = entry['port']
        if isinstance(first, int) and first <= port <= entry.get('endPort', first):
            return True
    return False


def ingress_admitted(policy, target, source, port=2222):
    """Whether ``policy`` lets ``source`` (a pod: namespace, labels, ip) connect to ``port`` of
    ``target``. A pod the policy does not select is not isolated by it."""
    spec, namespace = policy['spec'], policy['metadata'].get('namespace', 'default')
    if target['namespace'] != namespace or not selector_matches(spec.get('podSelector'), target['labels']):
        return True
    types = spec.get('policyTypes') or ['Ingress']
    if 'Ingress' not in types:
        return True
    for rule in spec.get('ingress') or []:
        peers = rule.get('from')
        if not port_admitted(rule, port):
            continue
        if not peers or any(peer_admits(peer, namespace, source) for peer in peers):
            return True         # a rule without ``from`` admits every source
    return False


def pod(labels, namespace='training', ip='10.8.1.7', **more):
    return dict(labels=labels, namespace=namespace, ip=ip, **more)


def machine_outside(ip='203.0.113.9'):
    return dict(labels={}, namespace=None, ip=ip)


def test_the_evaluator_follows_kubernetes_rules():
    """The evaluator's verdicts on policies whose meaning Kubernetes documents, so that its
    verdict on the manifest of docs/security.md means something."""
    target = pod({'app': 'db'})
    base = {'apiVersion': 'networking.k8s.io/v1', 'kind': 'NetworkPolicy',
            'metadata': {'name': 'p', 'namespace': 'training'}}

    def policy(spec):
        return dict(base, spec=dict({'podSelector': {'matchLabels': {'app': 'db'}}}, **spec))

    stranger, outside = pod({'app': 'web'}, namespace='other'), machine_outside()
    deny_all = policy({'policyTypes': ['Ingress']})
    assert not ingress_admitted(deny_all, target, pod({'app': 'db'}))
    allow_all = policy({'policyTypes': ['Ingress'], 'ingress': [{}]})
    assert ingress_admitted(allow_all, target, stranger) and ingress_admitted(allow_all, target, outside)
    egress_only = policy({'policyTypes': ['Egress']})
    assert ingress_admitted(egress_only, target, stranger)
    assert ingress_admitted(deny_all, pod({'app': 'other'}), stranger)      # not selected: not isolated
    any_namespace = policy({'ingress': [{'from': [{'namespaceSelector': {}}]}]})
    assert ingress_admitted(any_namespace, target, stranger)
    assert not ingress_admitted(any_namespace, target, outside)
    both = policy({'ingress': [{'from': [{'namespaceSelector': {'matchLabels': {'team': 'ml'}},
                                          'podSelector': {'matchLabels': {'app': 'web'}}}]}]})
    assert ingress_admitted(both, target, pod({'app': 'web'}, namespace='x', namespace_labels={'team': 'ml'}))
    assert not ingress_admitted(both, target, pod({'app': 'web'}, namespace='x'))
    same_namespace = policy({'ingress': [{'from': [{'podSelector': {'matchLabels': {'app': 'web'}}}]}]})
    assert ingress_admitted(same_namespace, target, pod({'app': 'web'}))
    assert not ingress_admitted(same_namespace, target, stranger)             # same labels, other namespace
    block = policy({'ingress': [{'from': [{'ipBlock': {'cidr': '203.0.113.0/24',
                                                       'except': ['203.0.113.9/32']}}]}]})
    assert ingress_admitted(block, target, machine_outside('203.0.113.8'))
    assert not ingress_admitted(block, target, outside)
    ports = policy({'ingress': [{'ports': [{'port': 2222, 'endPort': 2223}]}]})
    assert ingress_admitted(ports, target, stranger, port=2223)
    assert not ingress_admitted(ports, target, stranger, port=22)
    expressions = {'matchExpressions': [{'key': 'app', 'operator': 'In', 'values': ['web', 'api']},
                                        {'key': 'debug', 'operator': 'DoesNotExist'}]}
    assert selector_matches(expressions, {'app': 'api'})
    assert not selector_matches(expressions, {'app': 'api', 'debug': '1'})
    assert not selector_matches(expressions, {})


def test_every_yaml_block_parses_and_holds_one_network_policy():
    documents = yaml_documents()
    assert all(isinstance(d, dict) for d in documents), documents
    network_policy()
    labelled = [d for d in documents if d is not network_policy() and 'template' in d]
    assert labelled, "the pod-template fragment that labels the job's pods is missing"
    for fragment in labelled:
        assert JOB_LABEL in fragment['template']['metadata']['labels'], fragment


def test_the_network_policy_admits_only_the_pods_of_its_job():
    policy = network_policy()
    assert policy['apiVersion'] == 'networking.k8s.io/v1'
    assert policy['kind'] == 'NetworkPolicy'
    spec = policy['spec']
    assert 'Ingress' in spec['policyTypes']
    job = spec['podSelector']['matchLabels']
    assert job and JOB_LABEL in job, ("the policy must select the job's pods by its label (an empty "
                                      "selector selects every pod of the namespace)")
    rules = spec['ingress']
    assert len(rules) == 1, "one ingress rule: from the job's own pods"
    peers = rules[0].get('from')
    assert peers, "an ingress rule without 'from' admits every source"
    for peer in peers:
        assert 'ipBlock' not in peer and 'namespaceSelector' not in peer, peer
        assert peer['podSelector']['matchLabels'] == job, peer
    # the same, by evaluation
    name = job[JOB_LABEL]
    namespace = policy['metadata']['namespace']
    target = pod({JOB_LABEL: name, 'training.kubeflow.org/replica-type': 'worker'}, namespace)
    assert ingress_admitted(policy, target, pod({JOB_LABEL: name}, namespace))
    assert not ingress_admitted(policy, target, pod({JOB_LABEL: name + '-other'}, namespace))
    assert not ingress_admitted(policy, target, pod({}, namespace))
    assert not ingress_admitted(policy, target, pod({'app': 'notebook'}, namespace))
    assert not ingress_admitted(policy, target, pod({JOB_LABEL: name}, 'elsewhere'))   # same label, other ns
    assert not ingress_admitted(policy, target, machine_outside())


# ----- the table of recipes ------------------------------------------------------------------

def recipe_rows():
    """``[(recipe, exercised_by)]`` of the table headed ``| Recipe | Exercised by |``."""
    lines = read('docs', 'security.md').splitlines()
    header = re.compile(r'^\|\s*Recipe\s*\|\s*Exercised by\s*\|\s*$')
    starts = [i for i, line in enumerate(lines) if header.match(line)]
    assert len(starts) == 1, "docs/security.md needs one '| Recipe | Exercised by |' table"
    rows = []
    for line in lines[starts[0] + 2:]:
        if not line.startswith('|'):
            break
        cells = [cell.strip() for cell in line.strip().strip('|').split('|')]
        assert len(cells) == 2, line
        rows.append(tuple(cells))
    return rows


def test_every_recipe_names_a_test_that_exists_or_says_why_not():
    rows = recipe_rows()
    assert len(rows) >= 10
    named = 0
    for recipe, exercised_by in rows:
        tests = re.findall(r'(tests/[\w/]+\.py)::(\w+)', exercised_by)
        assert tests or 'not testable here' in exercised_by, (
            "recipe {!r} names no test and does not say why none can run here".format(recipe))
        for path, name in tests:
            assert os.path.isfile(os.path.join(REPO, path)), "{}: {} does not exist".format(recipe, path)
            defined = re.search(r'^\s*def {}\('.format(name), read(path), re.M) is not None
            assert defined, "{}: {} has no test {}".format(recipe, path, name)
            named += 1
    assert named >= 8


# ----- links and names ------------------------------------------------------------------------

@pytest.mark.parametrize('page, link', [('README.md', 'docs/security.md'),
                                        ('docs/distributed.md', 'security.md'),
                                        ('docs/slurm.md', 'security.md'),
                                        ('docs/horovod.md', 'security.md')])
def test_the_docs_that_start_jobs_link_to_it(page, link):
    text = read(page)
    assert re.search(r'\]\({}(#[\w-]+)?\)'.format(re.escape(link)), text), "{} does not link {}".format(
        page, link)
    assert os.path.isfile(os.path.join(REPO, os.path.dirname(page), link))


def test_the_readme_lists_it_among_the_docs():
    table = re.search(r'^\| page \| about \|\n(.*?)\n\n', read('README.md'), re.M | re.S)
    assert table and '[security.md](docs/security.md)' in table.group(1)


def package_source():
    texts = []
    for root, _, files in os.walk(os.path.join(REPO, 'tensorpack_lite')):
        texts += [read(root, name) for name in files if name.endswith('.py')]
    return '\n'.join(texts)


def test_the_names_it_gives_exist_in_the_code():
    doc, source = read('docs', 'security.md'), package_source()
    for name in ('TENSORPACK_LITE_TRUSTED_NETWORK', 'TENSORPACK_LITE_PRIVATE_NETWORK', 'PublicAddressError',
                 'check_server_exposure', 'describe_listening', 'trusted_network', 'isolate', "'10.0.2.2'",
                 "'--no-isolation'", "'--isolation'", 'no private network', 'isolation is required',
                 'PrivateNetworkUnavailable', 'allow_pickle=False', 'curve_clients',
                 'curve_server_key', 'create_curve_keypair'):
        assert name.strip("'") in doc, name
        assert name in source, name


def test_the_mpi_engine_never_unpickles_what_a_peer_sends():
    """mpi4py's lower-case communicator methods pickle their objects and unpickle what peers
    send; the engine may call only the buffer (capitalised) methods."""
    pickling = {'send', 'recv', 'isend', 'irecv', 'ssend', 'issend', 'bsend', 'ibsend', 'sendrecv',
                'mprobe', 'improbe', 'bcast', 'gather', 'scatter', 'allgather', 'alltoall', 'reduce',
                'allreduce', 'scan', 'exscan', 'ibcast', 'igather', 'iscatter', 'iallgather', 'ialltoall',
                'ireduce', 'iallreduce'}
    path = os.path.join('tensorpack_lite', 'graph_builder', 'mpi_ops.py')
    tree = ast.parse(read(path))
    calls = [node for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr in pickling]
    found = ['{}:{}: .{}()'.format(path, node.lineno, node.func.attr) for node in calls]
    assert not found, "mpi4py methods that unpickle a peer's message: " + ', '.join(found)
    assert 'import pickle' not in read(path) and 'MPI.pickle' not in read(path)
    buffer_calls = [node for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and node.attr in ('Allreduce', 'Iallreduce')]
    assert buffer_calls, "the check looks at the wrong file: it calls no MPI Allreduce"
