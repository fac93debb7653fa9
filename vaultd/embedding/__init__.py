"""The embedding model: its spec and files (`spec`), its tokenizer (`tokens`) and the ONNX
Runtime session that turns texts into vectors (`embedder`).

Imports only the foundation. The one home of onnxruntime and tokenizers: anything that must
start fast (the light clients) stays out of this package.
"""
