"""The options of `apply --via gpu-operator` and `replan --via gpu-operator` (and the kubeconfig and context of
`-i kubectl` / `--pods kubectl`), declared once (docs/kubernetes.md)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from migplan.cli.options import MAX_SECONDS, choices, finite
from migplan.k8s.rollout import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE, DEFAULT_SETTLE_S, DEFAULT_TIMEOUT_S


class Via(str, Enum):
    ssh = "ssh"
    gpu_operator = "gpu-operator"


class Drain(str, Enum):
    never = "never"
    when_busy = "when-busy"
    always = "always"


ViaOpt = Annotated[Via, typer.Option("--via", help="ssh: nvidia-smi on each host; gpu-operator: the GPU Operator's "
                                     "MIG manager, through kubectl (nodes from 'kubectl get nodes').",
                                     metavar=choices(Via))]
KubeconfigOpt = Annotated[str | None, typer.Option("--kubeconfig", help="With --via gpu-operator, -i kubectl or "
                                                   "--pods kubectl: kubectl's kubeconfig [default: kubectl's own].",
                                                   show_default=False, metavar="FILE")]
ContextOpt = Annotated[str | None, typer.Option("--context", help="With --via gpu-operator, -i kubectl or --pods "
                                                "kubectl: the kubeconfig context [default: its current context].",
                                                show_default=False, metavar="NAME")]
ConfigMapOpt = Annotated[str, typer.Option("--configmap", help="With --via gpu-operator: the ConfigMap the MIG "
                                           "manager reads (the ClusterPolicy's spec.migManager.config.name).",
                                           metavar="NAME")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", "-n", help="With --via gpu-operator: its namespace.",
                                           metavar="NAMESPACE")]
MigConfigMapOpt = Annotated[str | None, typer.Option(
    "--mig-configmap", metavar="FILE|kubectl[:NAMESPACE/NAME]", show_default=False,
    help="The ConfigMap the GPU Operator's MIG manager reads: a file of 'kubectl get configmap -n NAMESPACE NAME -o "
         "json', or 'kubectl' to read it live (kubectl:NAMESPACE/NAME when it is not gpu-operator/"
         "default-mig-parted-config). A node whose applied config (nvidia.com/mig.config, state success) is in it "
         "gets each GPU's MIG devices from that config instead of a split inferred from the labels' counts "
         "[default: with -i kubectl, 'kubectl' where it exists and may be read; else none].")]
DrainOpt = Annotated[Drain, typer.Option("--drain", help="With --via gpu-operator, where work may be disrupted "
                                         "(apply --allow-disrupt; replan: replan.allow_disrupt in a maintenance "
                                         "window): cordon and evict a node's GPU pods (PodDisruptionBudgets honoured) "
                                         "before its change: never, when-busy (only a node with GPU pods), always.",
                                         metavar=choices(Drain))]
MigTimeoutOpt = Annotated[float, typer.Option("--mig-timeout", min=1.0, max=MAX_SECONDS, callback=finite,
                                              metavar="SECONDS",
                                              help="With --via gpu-operator: seconds per node for the MIG manager to "
                                                   "report success (then the label is put back).")]
SettleOpt = Annotated[float, typer.Option("--configmap-settle", min=0.0, max=MAX_SECONDS, callback=finite,
                                          metavar="SECONDS",
                                          help="With --via gpu-operator: seconds to wait after changing the ConfigMap "
                                               "(the kubelet's sync projects it into the MIG manager's pod).")]
__all__ = ["DEFAULT_CONFIGMAP", "DEFAULT_NAMESPACE", "DEFAULT_SETTLE_S", "DEFAULT_TIMEOUT_S"]
