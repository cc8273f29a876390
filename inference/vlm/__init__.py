"""VLM deployments: the rewards and OpenAI chat endpoints, window serving and the packed wire format."""
