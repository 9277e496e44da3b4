"""The faces users touch: graph nodes, agent middleware, chat history, RAG and reducers."""
