# syntax=docker/dockerfile:1
# hookstream's image: the service and the `hookstream` CLI on Node 24, without development dependencies,
# as a non-root user. NATS and Postgres run elsewhere (docker-compose.yml runs both beside it).
#   docker build -t hookstream .
#   docker run --rm hookstream keys generate
# Every setting is an environment variable (docs/configuration.md); NODE_ENV=production makes the service
# refuse to start without its three keys rather than generate them.

# Dependencies alone, so the layer is rebuilt only when the lock file changes. --omit=optional leaves out
# the embedded Postgres binaries, which only `npm start` on a developer's machine uses.
FROM node:24.21.0-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --omit=optional --no-audit --no-fund && npm cache clean --force

FROM node:24.21.0-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    OPS_HOST=0.0.0.0 \
    CONSOLE_HOST=0.0.0.0
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json nats.conf LICENSE ./
COPY bin/hookstream ./bin/hookstream
COPY src ./src
COPY streams ./streams
COPY projections ./projections
# `hookstream …` in `docker compose exec` and `docker run --entrypoint`.
RUN ln -s /app/bin/hookstream /usr/local/bin/hookstream
# The files stay root's and read-only to the service: it writes nothing in production.
USER node
# The API and the tenant portal; /healthz, /readyz and /metrics; the operator console. Publish the last two
# only where operators reach them.
EXPOSE 8080 9090 8090
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.OPS_PORT || 9090) + '/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# bin/hookstream execs node, so node gets SIGTERM itself and drains in-flight attempts before it exits
# (give it a stop timeout longer than HOOKSTREAM_SHUTDOWN_TIMEOUT, 10 s by default).
ENTRYPOINT ["/app/bin/hookstream"]
CMD ["serve"]
