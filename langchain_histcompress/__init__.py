"""langchain-histcompress."""
