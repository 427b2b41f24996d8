"""The pod's faces on the network: the asyncio server, its front door (gate), the link to the
scheduler, peers and tile transfer."""
