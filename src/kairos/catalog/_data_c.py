"""Catalog domains: shopping, health, music, news, devops."""

from __future__ import annotations

from kairos.catalog._spec import Domain
from kairos.catalog._spec import ToolDef as T

SHOPPING = Domain(
    "shopping",
    "Online shopping and e-commerce: search products, compare prices, product reviews, shopping cart, "
    "place and track orders, returns, restaurant table reservations and food delivery.",
    (
        T(
            "search_products",
            "Search an online store for products with prices and ratings. Cannot buy (use add_to_cart).",
            (
                "query:str! What to buy, e.g. 'wireless headphones'",
                "max_price:num Highest price",
                "limit:int=5 Results per page",
            ),
            ("product_id", "name", "price", "rating_score"),
            many=True,
        ),
        T(
            "get_product_reviews",
            "Customer reviews of one product with star ratings.",
            ("product_id:str! Id from search_products", "limit:int=5 Results per page"),
            ("stars", "review", "date"),
            many=True,
        ),
        T(
            "compare_prices",
            "The price of the same product at several stores, cheapest first.",
            ("product_name:str! Exact product, e.g. 'iPhone 15 128GB'",),
            ("store", "price", "in_stock_available"),
            many=True,
        ),
        T(
            "add_to_cart",
            "Put a product into the user's shopping cart. Does not pay (use checkout_cart).",
            ("product_id:str! Product id", "quantity:int=1 How many"),
            ("cart_count", "total"),
            effect=True,
        ),
        T(
            "checkout_cart",
            "Pay for everything in the cart with the saved card and place the order. Irreversible.",
            ("shipping_speed:enum(standard,express)=standard Delivery speed",),
            ("order_id", "total"),
            effect=True,
        ),
        T(
            "track_order",
            "Where an order is: shipping status, carrier and expected delivery date.",
            ("order_id:str! Order id, e.g. order-12ab34",),
            ("status", "carrier", "expected_delivery_date"),
        ),
        T(
            "request_return",
            "Start a return and refund for an item of a past order.",
            ("order_id:str! Order id", "reason:str! Why it is returned"),
            ("return_id", "refund_amount"),
            effect=True,
        ),
        T(
            "book_restaurant",
            "Reserve a table at a restaurant for a date, time and party size.",
            (
                "restaurant:str! Restaurant name",
                "date:date! Day, YYYY-MM-DD",
                "time:str! HH:MM 24h, e.g. 19:30",
                "party_size:int=2 Number of people",
            ),
            ("reservation_id",),
            effect=True,
        ),
        T(
            "order_food_delivery",
            "Order meals for home delivery from a restaurant's menu.",
            (
                "restaurant:str! Restaurant name",
                "items:list! Dishes, e.g. ['margherita pizza']",
                "address:str! Delivery address",
            ),
            ("order_id", "total", "eta_minutes"),
            effect=True,
        ),
    ),
)

HEALTH = Domain(
    "health",
    "Health, fitness and nutrition: food nutrition facts, calorie and BMI calculations, workouts, step counts, "
    "sleep tracking, medication information and drug interactions, symptoms, finding doctors.",
    (
        T(
            "get_nutrition_facts",
            "Calories, protein, carbs and fat of a food or dish per serving. Cannot plan whole diets.",
            ("food:str! Food, e.g. 'banana' or '2 eggs'",),
            ("calories", "protein_g_count", "carbs_g_count", "fat_g_count"),
        ),
        T(
            "calculate_bmi",
            "Body mass index from weight and height, with its category. Pure calculation.",
            ("weight_kg:num! Weight in kilograms, e.g. 70", "height_cm:num! Height in centimeters, e.g. 175"),
            ("bmi_value", "category"),
        ),
        T(
            "log_workout",
            "Record a workout (activity, minutes) in the user's fitness log.",
            ("activity:str! e.g. running", "duration_minutes:int! Minutes", "date:date Day, YYYY-MM-DD"),
            ("workout_id", "calories"),
            effect=True,
        ),
        T(
            "get_step_count",
            "The user's step count from their fitness tracker for a day.",
            ("date:date! Day, YYYY-MM-DD",),
            ("steps", "distance_km"),
        ),
        T(
            "get_sleep_summary",
            "How long and how well the user slept on a night, from their tracker.",
            ("date:date! Night, YYYY-MM-DD",),
            ("sleep_hours", "deep_sleep_hours", "score"),
        ),
        T(
            "get_medication_info",
            "Uses, usual dose and side effects of a medicine. Not medical advice; cannot prescribe.",
            ("drug:str! Medicine name, e.g. ibuprofen",),
            ("uses", "usual_dose", "side_effects"),
        ),
        T(
            "check_drug_interactions",
            "Whether two or more medicines interact badly when taken together.",
            ("drugs:list! Medicine names, e.g. ['warfarin', 'aspirin']",),
            ("has_interaction", "severity", "details"),
        ),
        T(
            "find_doctors",
            "Doctors of a specialty near a location, with ratings and next available appointment.",
            ("specialty:str! e.g. dermatologist", "location:str! City", "limit:int=5 Results per page"),
            ("doctor_id", "name", "rating_score", "next_available_date"),
            many=True,
        ),
    ),
)

MUSIC = Domain(
    "music",
    "Music streaming: search songs, albums and artists, play and queue tracks, playlists, song lyrics, "
    "recommendations, concerts, podcasts.",
    (
        T(
            "search_music",
            "Search the music catalog for songs, albums or artists.",
            (
                "query:str! e.g. 'Bohemian Rhapsody'",
                "type:enum(track,album,artist)=track What to find",
                "limit:int=5 Results per page",
            ),
            ("track_id", "title", "artist", "duration_minutes"),
            many=True,
        ),
        T(
            "play_track",
            "Start playing a song on the user's music player by track id or song name.",
            ("track:str! Track id or 'song by artist'",),
            ("track_id", "status"),
            effect=True,
        ),
        T(
            "create_playlist",
            "Create a new playlist, optionally with tracks.",
            ("name:str! Playlist name", "track_ids:list Tracks to add"),
            ("playlist_id", "url"),
            effect=True,
        ),
        T(
            "add_to_playlist",
            "Add tracks to an existing playlist. Cannot create playlists (use create_playlist).",
            ("playlist_id:str! Playlist id", "track_ids:list! Tracks to add"),
            ("playlist_id", "track_count"),
            effect=True,
        ),
        T(
            "get_lyrics",
            "The lyrics of a song by title and artist.",
            ("title:str! Song title", "artist:str! Artist name"),
            ("lyrics", "source"),
        ),
        T(
            "get_artist_info",
            "Biography, genres and top tracks of a musician or band.",
            ("artist:str! Artist name, e.g. Radiohead",),
            ("biography", "genres", "listeners_count"),
        ),
        T(
            "recommend_songs",
            "Songs similar to a given song or artist the user likes.",
            ("seed:str! A song or artist", "limit:int=10 Results per page"),
            ("track_id", "title", "artist"),
            many=True,
        ),
        T(
            "find_concerts",
            "Upcoming concerts of an artist or in a city, with dates and venues.",
            ("artist:str Artist name", "city:str City", "limit:int=5 Results per page"),
            ("event_id", "artist", "venue", "date"),
            many=True,
        ),
        T(
            "search_podcasts",
            "Find podcast shows and episodes about a topic.",
            ("query:str! Topic, e.g. 'history of Rome'", "limit:int=5 Results per page"),
            ("podcast_id", "title", "episode_count"),
            many=True,
        ),
    ),
)

NEWS = Domain(
    "news",
    "News and current events: latest headlines, news articles about a topic or company, sports scores, "
    "fact-checking, trending topics, RSS feeds.",
    (
        T(
            "get_top_headlines",
            "Today's top news headlines, optionally for a country or category (business, sports, tech).",
            ("category:str=general e.g. business", "country:str=us ISO country code", "limit:int=5 Results per page"),
            ("title", "source", "published_at", "url"),
            many=True,
        ),
        T(
            "search_news",
            "Search recent news articles about a topic, person or company. Use for 'news about X' or 'why did X "
            "happen'. Cannot give stock prices.",
            (
                "query:str! Topic, e.g. 'Apple earnings'",
                "days:int=7 How many past days",
                "limit:int=5 Results per page",
            ),
            ("title", "source", "published_at", "url"),
            many=True,
        ),
        T(
            "get_sports_scores",
            "Latest scores and results of games in a sports league.",
            ("league:str! e.g. NBA, Premier League", "date:date Day, YYYY-MM-DD"),
            ("home_team", "away_team", "score", "status"),
            many=True,
        ),
        T(
            "fact_check_claim",
            "Look up fact-checks of a claim from fact-checking organisations with a verdict.",
            ("claim:str! The claim, e.g. 'the Great Wall is visible from space'",),
            ("verdict", "source", "url"),
        ),
        T(
            "get_trending_topics",
            "What people are talking about right now on social media, by region.",
            ("region:str=global Region or country",),
            ("topic", "mentions_count"),
            many=True,
        ),
        T(
            "read_rss_feed",
            "The newest items of an RSS or Atom feed by URL.",
            ("feed_url:str! Feed address", "limit:int=10 Results per page"),
            ("title", "published_at", "url"),
            many=True,
        ),
        T(
            "summarize_news_topic",
            "A short neutral summary of how a news story developed over the last days, from several sources.",
            ("topic:str! News story, e.g. 'Mars sample return'",),
            ("summary", "sources_count"),
        ),
    ),
)

DEVOPS = Domain(
    "devops",
    "Cloud infrastructure and operations: servers, Kubernetes deployments, service logs, CPU and memory "
    "metrics, incidents and on-call, DNS records, SSL certificates, uptime checks, CI builds.",
    (
        T(
            "get_service_status",
            "Health and uptime of a deployed service: running instances, error rate, last deploy.",
            ("service:str! Service name, e.g. checkout-api",),
            ("status", "instances_count", "error_rate", "last_deploy_at"),
        ),
        T(
            "query_logs",
            "Search a service's logs for a text or level in a time window. Cannot change log retention.",
            ("service:str! Service name", "query:str! Text or level, e.g. 'ERROR timeout'", "minutes:int=60 Look back"),
            ("timestamp_at", "level", "message"),
            many=True,
        ),
        T(
            "get_metrics",
            "A service's CPU, memory or latency metric over the last minutes.",
            (
                "service:str! Service name",
                "metric:enum(cpu,memory,latency,requests)! Which metric",
                "minutes:int=60 Window",
            ),
            ("time", "value"),
            many=True,
        ),
        T(
            "scale_deployment",
            "Change the number of replicas of a Kubernetes deployment.",
            (
                "deployment:str! Deployment name",
                "replicas:int! Desired replica count",
                "namespace:str=default Namespace",
            ),
            ("deployment", "replicas_count"),
            effect=True,
        ),
        T(
            "restart_service",
            "Restart all instances of a service (rolling restart). Causes brief errors.",
            ("service:str! Service name",),
            ("status",),
            effect=True,
        ),
        T(
            "create_incident",
            "Open an incident and page the on-call engineer.",
            ("title:str! What is broken", "severity:enum(sev1,sev2,sev3)! Severity", "service:str Affected service"),
            ("incident_id", "url"),
            effect=True,
        ),
        T(
            "lookup_dns_records",
            "DNS records (A, AAAA, CNAME, MX, TXT) of a domain name.",
            ("domain:str! e.g. example.com", "record_type:enum(A,AAAA,CNAME,MX,TXT)=A Record type"),
            ("name", "record_type", "value"),
            many=True,
        ),
        T(
            "check_ssl_certificate",
            "Issuer and expiry date of a website's SSL/TLS certificate.",
            ("domain:str! e.g. example.com",),
            ("issuer", "expires_at", "is_valid"),
        ),
        T(
            "check_website_uptime",
            "Whether a website is up right now and its response time.",
            ("url:str! e.g. https://example.com",),
            ("is_up", "response_minutes", "status_code_number"),
        ),
        T(
            "trigger_ci_build",
            "Start a CI pipeline build for a repository branch.",
            ("repo:str! owner/name", "branch:str=main Branch"),
            ("build_id", "url"),
            effect=True,
        ),
    ),
)

DOMAINS_C = (SHOPPING, HEALTH, MUSIC, NEWS, DEVOPS)
