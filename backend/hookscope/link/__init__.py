"""The link to the editor: the agent (socket, outgoing queue, process policy), the wire protocol, its codec and handshake, and the generator of the TypeScript protocol types."""
