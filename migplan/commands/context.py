"""Build what a command needs from its options, the config file and the environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from migplan.catalog import Catalog, load_catalog
from migplan.config import Config, load_config
from migplan.documents import PendingProfiles, load_profiles, start_profiles
from migplan.errors import InputError
from migplan.inventory import Inventory, load_inventory
from migplan.profiles import ProfileSet, check_models

if TYPE_CHECKING:
    from migplan.adapters.kubectl import KubectlOptions


# `-i kubectl` / `--pods kubectl` (and `inventory: kubectl` in the config): read the cluster live, through the one
# kubectl adapter, instead of a file; a file of that name is `./kubectl` (docs/kubernetes.md, "Live reads").
LIVE = "kubectl"


@dataclass(frozen=True)
class Context:
    config: Config
    catalog: Catalog
    output: str
    kubectl: KubectlOptions | None = None  # how live reads reach the cluster (None: kubectl's defaults)
    mig_configmap: str | None = None  # --mig-configmap FILE|kubectl[:NAMESPACE/NAME] (`k8s_live.mig_configmap`)

    def inventory_path(self, path: str | None) -> str:
        chosen = path or self.config.inventory
        if not chosen:
            raise InputError("no inventory given",
                             hint="pass --inventory FILE, set MIGPLAN_INVENTORY, or 'inventory:' in the config file")
        return chosen

    def inventory(self, path: str | None) -> Inventory:
        chosen = self.inventory_path(path)
        if chosen == LIVE or self.mig_configmap is not None:
            from migplan.commands import k8s_live  # kubectl only when asked for

            source = k8s_live.mig_configmap(self.mig_configmap, live=chosen == LIVE)
            if chosen == LIVE:
                return k8s_live.read_nodes(self.kubectl, self.catalog, configmap=source)[1]
            return load_inventory(chosen, self.catalog, k8s_live.read_configmap(source, self.kubectl)[0])
        return load_inventory(chosen, self.catalog)

    def profiles_path(self, path: str | None) -> str:
        chosen = path or self.config.profiles
        if not chosen:
            raise InputError("no workload profiles given",
                             hint="pass --profiles DIR, set MIGPLAN_PROFILES, or 'profiles:' in the config file")
        return chosen

    def profiles(self, path: str | None) -> ProfileSet:
        pset = load_profiles(self.profiles_path(path))
        check_models(pset, self.catalog)
        return pset

    def start_profiles(self, path: str | None) -> PendingProfiles:
        """`profiles(path)` begun now (in worker processes when large) and finished by `profiles_result`;
        every error is raised there, where `profiles(path)` would have raised it."""
        try:
            return start_profiles(self.profiles_path(path))
        except InputError as err:
            return start_profiles(err)

    def profiles_result(self, pending: PendingProfiles) -> ProfileSet:
        pset = pending.result()
        check_models(pset, self.catalog)
        return pset


def build_context(config_path: str | None, catalog_paths: list[str] | None, output: object,
                  kubectl: KubectlOptions | None = None, mig_configmap: str | None = None) -> Context:
    config = load_config(config_path)
    catalog = load_catalog([*config.catalog, *(catalog_paths or [])])
    fmt = getattr(output, "value", output) or config.output or "table"
    return Context(config=config, catalog=catalog, output=str(fmt), kubectl=kubectl, mig_configmap=mig_configmap)
