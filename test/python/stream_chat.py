"""Streams one chat completion through the gateway with the official openai SDK and prints, as
JSON, the content it read and how the stream ended: {"content", "error": null | {"class", "code", "type"}}.

usage: stream_chat.py BASE_URL API_KEY MODEL
"""
import json
import sys

import openai


def main() -> None:
    base_url, key, model = sys.argv[1:4]
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)
    content = ""
    error = None
    try:
        stream = client.chat.completions.create(model=model, stream=True, messages=[{"role": "user", "content": "hello"}])
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                content += chunk.choices[0].delta.content
    except openai.APIError as e:
        error = {"class": type(e).__name__, "api_error": True, "code": getattr(e, "code", None), "type": getattr(e, "type", None)}
    except Exception as e:  # noqa: BLE001 - the test wants to know what else a client would see
        error = {"class": type(e).__name__, "api_error": False, "code": None, "type": None}
    print(json.dumps({"content": content, "error": error}))


if __name__ == "__main__":
    main()
