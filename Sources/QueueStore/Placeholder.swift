// placeholder: durable queue engines land here
