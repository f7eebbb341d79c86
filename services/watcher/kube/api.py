"""A thin, generic API client: one resource descriptor, a few verbs, plain dicts.

kubernetes-asyncio's typed APIs deserialize into model classes (slow for Pods, and no use for
CRDs such as RayJob or ClusterQueue); its ``ApiClient`` still does what matters: auth (token,
client certificates, in-cluster), TLS and the base URL. So every call goes through
``ApiClient.call_api`` with a path built from a :class:`Resource`, and JSON stays JSON.

Every error leaves this module as a :mod:`~services.watcher.kube.errors` exception.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from services.watcher.kube.errors import KubeError, from_status, translate

__all__ = ["MERGE_PATCH", "KubeClient", "Resource"]

MERGE_PATCH = "application/merge-patch+json"  # RFC 7386; works for CRDs, unlike strategic merge
JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: ``/apis/<group>/<version>/<plural>``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            root += f"/namespaces/{namespace}"
        root += f"/{self.plural}"
        if name:
            root += f"/{name}"
            if subresource:
                root += f"/{subresource}"
        return root

    def __str__(self) -> str:
        return f"{self.plural}.{self.api_version}"


class KubeClient:
    """One authenticated connection pool to the API server, shared by every watch and patch."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    @classmethod
    def for_host(cls, host: str) -> KubeClient:
        """A client for an unauthenticated server (tests: kmock)."""
        configuration = Configuration(host=host)
        return cls(ApiClient(configuration))

    @classmethod
    async def from_environment(cls) -> KubeClient:
        """In-cluster service account if there is one, else the kubeconfig from KUBECONFIG."""
        configuration = Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            await kube_config.load_kube_config(
                config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
            )
        return cls(ApiClient(configuration))

    async def close(self) -> None:
        await self.api_client.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # --- verbs ------------------------------------------------------------------------------

    async def list(
        self, resource: Resource, *, namespace: str | None = None, label_selector: str = ""
    ) -> tuple[list[JsonObject], str]:
        """All objects and the list's resourceVersion (the point a watch resumes from).

        Built-in kinds omit ``apiVersion``/``kind`` on list items; they are filled in, so an
        object looks the same whether it came from a list or a watch.
        """
        query = [("labelSelector", label_selector)] if label_selector else None
        body = await self._call("GET", resource.path(namespace=namespace), query=query)
        items = [_with_type(item, resource) for item in body.get("items") or []]
        return items, str((body.get("metadata") or {}).get("resourceVersion") or "")

    async def get(self, resource: Resource, *, namespace: str, name: str) -> JsonObject:
        return _with_type(
            await self._call("GET", resource.path(namespace=namespace, name=name)), resource
        )

    async def create(self, resource: Resource, *, namespace: str, body: JsonObject) -> JsonObject:
        """POST a new object; 409 (:class:`KubeConflict`) if the name is taken."""
        result = await self._call("POST", resource.path(namespace=namespace), body=body)
        return _with_type(result, resource)

    async def patch(
        self,
        resource: Resource,
        *,
        namespace: str,
        name: str,
        body: JsonObject,
        subresource: str = "",
    ) -> JsonObject:
        """A JSON merge patch; ``metadata.resourceVersion`` in ``body`` makes it conditional."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        result = await self._call("PATCH", path, body=body, content_type=MERGE_PATCH)
        return _with_type(result, resource)

    async def delete(
        self,
        resource: Resource,
        *,
        namespace: str,
        name: str,
        preconditions: dict[str, str],
        propagation_policy: str = "",
    ) -> None:
        """Delete if the object still is what we read (uid and/or resourceVersion), else 409.

        ``propagation_policy`` ``Background`` deletes a Job's pods after the Job; without it a
        batch/v1 Job's default (``orphan``, for compatibility) would leave its pods running.
        """
        body: JsonObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        body["preconditions"] = preconditions
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        await self._call("DELETE", resource.path(namespace=namespace, name=name), body=body)

    async def read_text(self, path: str, *, query: Sequence[tuple[str, str]]) -> str:
        """GET a plain-text subresource (a pod's ``log``)."""
        try:
            response: aiohttp.ClientResponse = await self.api_client.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": "text/plain, */*"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=30,
            )
        except Exception as error:
            raise translate(error) from error
        try:
            data = await response.read()
            if response.status >= 300:
                text = data.decode(errors="replace")
                raise from_status(response.status, f"{response.status}: {text[:300]}")
            return data.decode(errors="replace")
        except aiohttp.ClientError as error:
            raise translate(error) from error
        finally:
            response.release()

    @asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        timeout_seconds: int,
        namespace: str | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a watch stream; the caller reads lines from ``response.content``.

        ``watch=true`` in lower case, as kubectl sends it (kubernetes-asyncio's own Watch sends
        ``True``). The stream asks for bookmarks, so a quiet resource still advances our
        resourceVersion, and for a server-side timeout, so a healthy stream ends regularly.
        """
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        try:
            response: aiohttp.ClientResponse = await self.api_client.call_api(
                resource.path(namespace=namespace),
                "GET",
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,  # stream it; note: no status check is done then
            )
        except Exception as error:
            raise translate(error) from error
        try:
            if response.status >= 300:
                text = (await response.read()).decode(errors="replace")
                raise from_status(response.status, f"{response.status}: {text[:300]}")
            yield response
        finally:
            response.release()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        content_type: str = "application/json",
        query: Sequence[tuple[str, str]] | None = None,
    ) -> JsonObject:
        try:
            result = await self.api_client.call_api(
                path,
                method,
                query_params=query,
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=30,
            )
        except KubeError:
            raise
        except Exception as error:
            raise translate(error) from error
        if isinstance(result, str):  # a server that answers with a non-JSON content type
            result = json.loads(result)
        return result if isinstance(result, dict) else {}


def _with_type(obj: JsonObject, resource: Resource) -> JsonObject:
    obj.setdefault("apiVersion", resource.api_version)
    obj.setdefault("kind", resource.kind)
    return obj
