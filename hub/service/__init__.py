"""The hub as a job server: HubService over gRPC, its tokens, uploads, submitted runs and backend registry."""
