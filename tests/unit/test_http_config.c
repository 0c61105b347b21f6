/* SPDX-License-Identifier: MIT */
/* test_http_config.c - semad's flags and SEMA_* variables. */
#include <stdlib.h>
#include <string.h>

#include "common/parse.h"
#include "sema/error.h"
#include "semad/config.h"
#include "test.h"

TEST(defaults)
{
    semad_config_t c;
    config_default(&c);
    ASSERT_STREQ(c.http.listen, "127.0.0.1:7070");
    ASSERT_STREQ(c.data_dir, "./sema-data");
    ASSERT_EQ(c.durability, STORE_STRICT);
    ASSERT_GT(c.http.max_connections, 10000);
    ASSERT_GT(c.http.max_header_bytes, 0);
    ASSERT_GT(c.http.max_body_bytes, 0);
}

TEST(flags_and_env)
{
    semad_config_t c;
    char err[128];
    config_default(&c);
    setenv("SEMA_LISTEN", "127.0.0.1:9999", 1);
    setenv("SEMA_MAX_BODY_BYTES", "123", 1);
    char *argv[] = {"semad", "--listen",         "127.0.0.1:0", "--durability=none", "--max-ttl",
                    "2h",    "--header-timeout", "250ms",       "--log-requests",    NULL};
    ASSERT_OK(config_parse(&c, 9, argv, err, sizeof err));
    ASSERT_STREQ(c.http.listen, "127.0.0.1:0"); /* the flag wins */
    ASSERT_EQ(c.http.max_body_bytes, 123);      /* from the environment */
    ASSERT_EQ(c.durability, STORE_NONE);
    ASSERT_EQ(c.engine.max_ttl_ms, 7200000);
    ASSERT_EQ(c.http.header_timeout_ms, 250);
    ASSERT_EQ(c.http.log_requests, 1);
    unsetenv("SEMA_LISTEN");
    unsetenv("SEMA_MAX_BODY_BYTES");
}

TEST(bad_values_name_the_flag)
{
    semad_config_t c;
    char err[128];
    config_default(&c);
    char *a1[] = {"semad", "--max-connections", "-5", NULL};
    ASSERT_EQ(config_parse(&c, 3, a1, err, sizeof err), SEMA_EINVAL);
    ASSERT_NOT_NULL(strstr(err, "--max-connections"));
    char *a2[] = {"semad", "--durability", "sometimes", NULL};
    ASSERT_EQ(config_parse(&c, 3, a2, err, sizeof err), SEMA_EINVAL);
    char *a3[] = {"semad", "--no-such-flag", NULL};
    ASSERT_EQ(config_parse(&c, 2, a3, err, sizeof err), SEMA_EINVAL);
    ASSERT_NOT_NULL(strstr(err, "--no-such-flag"));
    char *a4[] = {"semad", "--listen", NULL};
    ASSERT_EQ(config_parse(&c, 2, a4, err, sizeof err), SEMA_EINVAL);
    setenv("SEMA_IDLE_TIMEOUT", "soon", 1);
    char *a5[] = {"semad", NULL};
    ASSERT_EQ(config_parse(&c, 1, a5, err, sizeof err), SEMA_EINVAL);
    ASSERT_NOT_NULL(strstr(err, "SEMA_IDLE_TIMEOUT"));
    unsetenv("SEMA_IDLE_TIMEOUT");
}

TEST(durations_and_numbers)
{
    int64_t ms;
    uint64_t u;
    ASSERT_OK(parse_ms("1500ms", &ms));
    ASSERT_EQ(ms, 1500);
    ASSERT_EQ(parse_ms("1500", &ms), SEMA_EINVAL); /* a bare number: which unit? */
    ASSERT_OK(parse_ms("0", &ms));
    ASSERT_EQ(ms, 0);
    ASSERT_OK(parse_ms("10s", &ms));
    ASSERT_EQ(ms, 10000);
    ASSERT_OK(parse_ms("5m", &ms));
    ASSERT_EQ(ms, 300000);
    ASSERT_EQ(parse_ms("5d", &ms), SEMA_EINVAL);
    ASSERT_EQ(parse_ms("-1", &ms), SEMA_EINVAL);
    ASSERT_EQ(parse_ms("99999999999999999999", &ms), SEMA_EINVAL);
    ASSERT_OK(parse_u64("0", &u));
    ASSERT_EQ(parse_u64("12x", &u), SEMA_EINVAL);
    ASSERT_EQ(parse_u64("", &u), SEMA_EINVAL);
}

TEST(tls_flags_go_together_and_the_per_address_cap)
{
    semad_config_t c;
    char err[128];
    config_default(&c);
    ASSERT_EQ(c.http.max_connections_per_ip, 1024);
    ASSERT_NULL(c.http.tls_cert);
    char *a1[] = {"semad", "--tls-cert", "c.pem", NULL};
    ASSERT_EQ(config_parse(&c, 3, a1, err, sizeof err), SEMA_EINVAL);
    ASSERT_NOT_NULL(strstr(err, "--tls-key"));
    config_default(&c);
    char *a2[] = {"semad", "--tls-client-ca", "ca.pem", NULL};
    ASSERT_EQ(config_parse(&c, 3, a2, err, sizeof err), SEMA_EINVAL);
    ASSERT_NOT_NULL(strstr(err, "--tls-cert"));
    config_default(&c);
    setenv("SEMA_TLS_KEY", "k.pem", 1);
    char *a3[] = {"semad", "--tls-cert=c.pem", "--max-connections-per-ip", "0", NULL};
    ASSERT_OK(config_parse(&c, 4, a3, err, sizeof err));
    unsetenv("SEMA_TLS_KEY");
    ASSERT_STREQ(c.http.tls_cert, "c.pem");
    ASSERT_STREQ(c.http.tls_key, "k.pem");
    ASSERT_EQ(c.http.max_connections_per_ip, 0);
}
