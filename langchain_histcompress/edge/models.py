"""Chat models named as ``"provider:model"`` strings, with precise errors instead of advice.

`chat_model_from_spec` is what ``RoundCompressor("openai:gpt-4o-mini")`` and the ``--model``
option of ``histcompress demo`` / ``bench`` use: LangChain's ``init_chat_model`` (from the
``langchain`` package, the ``agents`` extra) after the spec has been checked here, so a typo in
the provider, a missing provider package or a missing API key each get their own message.

Example:
    >>> try:
    ...     chat_model_from_spec("nosuch:x")
    ... except ConfigurationError as exc:
    ...     print(str(exc)[:66])
    unknown model provider 'nosuch' in 'nosuch:x'; known providers: an
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from langchain_core.language_models import BaseChatModel

from langchain_histcompress.core.errors import ConfigurationError

__all__ = ["PROVIDERS", "chat_model_from_spec"]

PROVIDERS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "openai": ("langchain_openai", ("OPENAI_API_KEY",)),
    "azure_openai": ("langchain_openai", ("AZURE_OPENAI_API_KEY",)),
    "anthropic": ("langchain_anthropic", ("ANTHROPIC_API_KEY",)),
    "google_genai": ("langchain_google_genai", ("GOOGLE_API_KEY", "GEMINI_API_KEY")),
    "google_vertexai": ("langchain_google_vertexai", ()),
    "bedrock": ("langchain_aws", ()),
    "bedrock_converse": ("langchain_aws", ()),
    "mistralai": ("langchain_mistralai", ("MISTRAL_API_KEY",)),
    "groq": ("langchain_groq", ("GROQ_API_KEY",)),
    "fireworks": ("langchain_fireworks", ("FIREWORKS_API_KEY",)),
    "together": ("langchain_together", ("TOGETHER_API_KEY",)),
    "cohere": ("langchain_cohere", ("COHERE_API_KEY",)),
    "deepseek": ("langchain_deepseek", ("DEEPSEEK_API_KEY",)),
    "xai": ("langchain_xai", ("XAI_API_KEY",)),
    "perplexity": ("langchain_perplexity", ("PPLX_API_KEY",)),
    "ollama": ("langchain_ollama", ()),
    "huggingface": ("langchain_huggingface", ()),
}
"""Providers accepted in a spec: the module of their LangChain package and the environment
variables that can hold their API key (empty: the provider needs none or finds it itself)."""


def chat_model_from_spec(spec: str, *, option: str = "model") -> BaseChatModel:
    """Create a chat model from ``"provider:model"`` (e.g. ``"openai:gpt-4o-mini"``).

    Args:
        spec: Provider and model name separated by the first colon.
        option: How the caller names the setting in messages (``"--model"`` on the CLI).

    Raises:
        ConfigurationError: The spec is malformed, the provider is unknown, its package or
            API key is missing (checked before anything is created), or LangChain cannot
            create the model.

    Example:
        >>> try:
        ...     chat_model_from_spec("gpt-4o-mini", option="--model")
        ... except ConfigurationError as exc:
        ...     print(exc)
        --model must look like provider:model (e.g. openai:gpt-4o-mini), got 'gpt-4o-mini'
    """
    provider, _, name = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    provider, name = provider.strip().lower(), name.strip()
    if not provider or not name:
        msg = f"{option} must look like provider:model (e.g. openai:gpt-4o-mini), got {spec!r}"
        raise ConfigurationError(msg)
    known = PROVIDERS.get(provider)
    if known is None:
        msg = (
            f"unknown model provider {provider!r} in {spec!r}; known providers: "
            f"{', '.join(sorted(PROVIDERS))}"
        )
        raise ConfigurationError(msg)
    module, keys = known
    if importlib.util.find_spec(module) is None:
        package = module.replace("_", "-")
        msg = f"{option} {spec}: provider {provider!r} needs its package (pip install {package})"
        raise ConfigurationError(msg)
    if keys and not any(os.environ.get(key) for key in keys):
        msg = f"{option} {spec} needs an API key: set {' or '.join(keys)}"
        raise ConfigurationError(msg)
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        msg = (
            f"{option} {spec} needs LangChain's init_chat_model: "
            "pip install 'langchain-histcompress[agents]'"
        )
        raise ConfigurationError(msg) from exc
    try:
        model = init_chat_model(name, model_provider=provider)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        msg = f"cannot create model {spec!r}: {reason}"
        raise ConfigurationError(msg) from exc
    if not isinstance(model, BaseChatModel):
        msg = f"{spec!r} did not give a chat model"
        raise ConfigurationError(msg)
    return model
