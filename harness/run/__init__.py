"""The parent side: a results folder per run, the child process, repeats, compliance audits, system description, parity and ONNX export."""
