# The cosim image plus ASTRA-sim 2.0's analytical binaries, built from a local checkout (containers/build-astrasim.sh
# copies it into the build context as astra-sim/); only Debian packages are downloaded, nothing from GitHub.
#
#   ASTRA_SIM_SRC=/path/to/astra-sim containers/build.sh          # cosim:local, then cosim-astrasim:local
#   containers/build-astrasim.sh /path/to/astra-sim               # cosim-astrasim:local on an existing cosim:local
ARG COSIM_IMAGE=cosim:local

# Stage 1: compile (g++, cmake, protoc, yaml-cpp from Debian; adapters/astrasim/build.sh, as on a host).
FROM ${COSIM_IMAGE} AS build
USER root
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      g++ make cmake protobuf-compiler libprotobuf-dev libyaml-cpp-dev >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY astra-sim /src/astra-sim
COPY build.sh /src/build.sh
RUN JOBS=${JOBS:-2} bash /src/build.sh /src/astra-sim /opt/astra-sim

# Stage 2: the cosim image with the two binaries on PATH and the libraries they link.
FROM ${COSIM_IMAGE}
USER root
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libprotobuf32 libyaml-cpp0.7 >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/astra-sim/bin/AstraSim_Analytical_Congestion_Unaware \
                  /opt/astra-sim/bin/AstraSim_Analytical_Congestion_Aware /usr/local/bin/
ENV COSIM_ASTRA_SIM=/usr/local/bin/AstraSim_Analytical_Congestion_Unaware
USER 10001:10001
